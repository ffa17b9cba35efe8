"""The SDK's template, migration and restore calls against a scripted phosd:
a gRPC server in this process (the generated PhosServicer) on a temporary
unix socket that records each request and answers with the events a test
gives it. Checks what is sent (fields, the peer token read from its file)
and how the streams are read: the `running` event's pid available while the
operation goes on, exit_status present or absent, the migration's result,
failures and refusals. Runs anywhere (no phosd, no CRIU); the real daemon is
test_sdk_process.py's.
"""
import os
import queue
import shutil
import tempfile
import threading
import unittest
from concurrent import futures

import grpc

import phos
from phos._stubs import pb, pb_grpc


def progress(phase, message=""):
    return pb.OperationEvent(operation_id=7, progress=pb.Progress(phase=phase, message=message))


def done(**fields):
    return pb.OperationEvent(operation_id=7, done=pb.OperationResult(**fields))


def failed(code, message):
    return pb.OperationEvent(operation_id=7, failed=pb.OperationError(code=code.value[0], message=message))


class ScriptedPhos(pb_grpc.PhosServicer):
    """Answers every streaming RPC with the script the test queued for it:
    a list of events, a threading.Event (wait for the test before going
    on) or a grpc.StatusCode (end the call with that status)."""

    def __init__(self):
        self.requests = queue.Queue()  # (rpc, request) in arrival order
        self.scripts = {}  # rpc -> list of steps; set by the test before the call
        self.templates = [pb.TemplateInfo(name="fn", dir="/t/fn", bytes=123, source_pid=11, running_pids=[40, 41])]

    def _play(self, rpc, request, context):
        self.requests.put((rpc, request))
        for step in self.scripts.pop(rpc):
            if isinstance(step, threading.Event):
                step.wait(10)
            elif isinstance(step, grpc.StatusCode):
                context.abort(step, "scripted %s" % step.name)
            else:
                yield step

    def Checkpoint(self, request, context):
        yield from self._play("Checkpoint", request, context)

    def Restore(self, request, context):
        yield from self._play("Restore", request, context)

    def Migrate(self, request, context):
        yield from self._play("Migrate", request, context)

    def TemplateSave(self, request, context):
        yield from self._play("TemplateSave", request, context)

    def TemplateStart(self, request, context):
        yield from self._play("TemplateStart", request, context)

    def Status(self, request, context):
        self.requests.put(("Status", request))
        return pb.StatusReply(version="0.1.0 abc", backend="sim", daemon_pid=9, socket_path="/s", session_count=2,
                              uptime_ms=2**53 + 1,  # not exact as a double: must come back an int, not via float
                              gpus=[pb.GpuInfo(ordinal=0, name="sim0", total_memory_bytes=2**40, uuid="u")],
                              counters={"fallbacks": 2**64 - 1, "none": 0})

    def ListSessions(self, request, context):
        self.requests.put(("ListSessions", request))
        return pb.ListSessionsReply(sessions=[
            pb.SessionInfo(session_id=2**62 + 3, pid=5, command="app --x", state=pb.SESSION_CHECKPOINTING,
                           buffer_count=4, counters={"cow_copies": 7}),
            pb.SessionInfo(pid=6, state=42),  # a state this SDK does not know (a newer phosd): its number
        ])

    def TemplateList(self, request, context):
        self.requests.put(("TemplateList", request))
        return pb.TemplateListReply(templates=self.templates, root="/t")

    def TemplateRemove(self, request, context):
        self.requests.put(("TemplateRemove", request))
        if request.name != "fn":
            context.abort(grpc.StatusCode.NOT_FOUND, "no template '%s'" % request.name)
        return pb.TemplateRemoveReply(removed_dir="/t/fn")


class SdkStreamsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="phos_sdk_streams_")
        cls.socket = os.path.join(cls.dir, "phosd.sock")
        cls.phosd = ScriptedPhos()
        cls.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_PhosServicer_to_server(cls.phosd, cls.server)
        cls.server.add_insecure_port("unix:" + cls.socket)
        cls.server.start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop(grace=None)
        shutil.rmtree(cls.dir, ignore_errors=True)

    def setUp(self):
        # What an earlier test left behind (a request it did not collect
        # because it failed) must not fail this one too.
        while not self.phosd.requests.empty():
            self.phosd.requests.get_nowait()
        self.phosd.scripts.clear()

    def script(self, rpc, *steps):
        self.phosd.scripts[rpc] = list(steps)

    def sent(self, rpc):
        got_rpc, request = self.phosd.requests.get(timeout=10)
        self.assertEqual(got_rpc, rpc)
        return request

    def token_file(self, text="s3cret\n", mode=0o600):
        path = os.path.join(self.dir, "token-%d" % len(os.listdir(self.dir)))
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)
        return path

    # ------------------------------------------------------------ restore

    def test_restore_running_pid_before_the_exit_status(self):
        go_on = threading.Event()
        self.script("Restore", progress("criu-restore", "criu"), progress("running", "restored pid 4242"), go_on,
                    done(image_dir="/img", pid=4242, total_ms=5, exit_status=3, counters={"criu_restore_ms": 2}))
        handle = phos.restore("/img", 1, gpu_only=False, socket=self.socket)
        self.assertEqual(handle.wait_running(10), 4242)
        self.assertEqual(handle.running_pid, 4242)
        self.assertFalse(handle.done(), "the stream stays open while the restored process runs")
        # Here the script holds the stream after `running`, so it is the
        # latest; against a real phosd only handle.phases is certain.
        self.assertEqual(handle.progress.phase, "running")
        self.assertEqual(handle.phases, ["criu-restore", "running"])
        with self.assertRaises(TimeoutError):
            handle.wait(0.05)
        go_on.set()
        result = handle.wait(10)
        self.assertEqual(result.pid, 4242)
        self.assertEqual(result.exit_status, 3)
        self.assertEqual(result.counters, {"criu_restore_ms": 2})
        req = self.sent("Restore")
        self.assertFalse(req.gpu_only)
        self.assertFalse(req.detach)
        self.assertEqual(req.image_dir, "/img")

    def test_load_events_after_running(self):
        # A concurrent restore goes on loading buffers after the process runs:
        # `load` events follow `running`, and the handle keeps the pid.
        go_on = threading.Event()
        self.script("Restore", progress("criu-restore"), progress("running", "restored pid 77"),
                    progress("load", "1/2"), progress("load", "2/2"), go_on, done(pid=77, exit_status=0))
        handle = phos.restore("/img", 1, gpu_only=False, socket=self.socket)
        self.assertEqual(handle.wait_running(10), 77)
        self.assertIn("running", handle.phases)
        go_on.set()
        self.assertEqual(handle.wait(10).exit_status, 0)
        self.assertEqual(handle.phases, ["criu-restore", "running", "load"])
        self.assertEqual((handle.progress.phase, handle.progress.message), ("load", "2/2"))
        self.assertEqual(handle.running_pid, 77)
        self.sent("Restore")

    def test_restore_without_exit_status(self):
        # Detached, or phosd is not the process's reaper: no `running` event,
        # no exit status; the result names the pid.
        self.script("Restore", done(image_dir="/img", pid=99))
        handle = phos.restore("/img", 1, gpu_only=False, socket=self.socket, detach=True)
        self.assertEqual(handle.wait_running(10), 99)
        result = handle.wait(10)
        self.assertIsNone(result.exit_status)
        self.assertEqual(result.pid, 99)
        self.assertTrue(self.sent("Restore").detach)

    def test_restore_verify_policy_is_sent_and_checked(self):
        self.script("Restore", done(image_dir="/img", pid=99))
        phos.restore("/img", 1, gpu_only=False, socket=self.socket, detach=True, verify="first").wait(10)
        self.assertEqual(self.sent("Restore").verify, "first")
        with self.assertRaises(ValueError):
            phos.restore("/img", 1, socket=self.socket, verify="sometimes")

    def test_exit_status_zero_is_not_none(self):
        self.script("Restore", progress("running", "restored pid 5"), done(pid=5, exit_status=0))
        self.assertEqual(phos.restore("/img", 1, gpu_only=False, socket=self.socket).wait(10).exit_status, 0)
        self.sent("Restore")

    def test_failure_before_running(self):
        self.script("Restore", failed(grpc.StatusCode.DATA_LOSS, "bad image"), grpc.StatusCode.DATA_LOSS)
        handle = phos.restore("/img", 1, gpu_only=False, socket=self.socket)
        with self.assertRaises(phos.PhosError) as cm:
            handle.wait_running(10)
        self.assertEqual(cm.exception.code, grpc.StatusCode.DATA_LOSS)
        self.assertEqual(cm.exception.message, "bad image")
        self.assertIsNone(handle.running_pid)
        self.sent("Restore")

    # ------------------------------------------------------------ queries

    def assert_message_dict(self, got, message_type, expected, apart=()):
        """`got` has every field of `message_type`, in the .proto's order; those
        in `expected` are equal, types included; those in `apart` the caller
        checks; the others are at their default (falsy). Fields phosd gains
        later do not break it."""
        self.assertEqual(list(got), [f.name for f in message_type.DESCRIPTOR.fields])
        self.assertEqual({k: got[k] for k in expected}, expected)
        for key, value in expected.items():
            self.assertIs(type(got[key]), type(value), key)
        for key in set(got) - set(expected) - set(apart):
            self.assertFalse(got[key], key)

    def test_status_and_sessions_are_plain_dicts(self):
        # Every field, defaults included; 64-bit integers as ints (not the
        # strings of JSON), enums by their short lower-case name, maps as
        # dicts, in every protobuf runtime the SDK supports.
        st = phos.status(socket=self.socket)
        self.assert_message_dict(st, pb.StatusReply, {
            "version": "0.1.0 abc", "backend": "sim", "backend_detail": "", "uptime_ms": 2**53 + 1, "daemon_pid": 9,
            "socket_path": "/s", "session_count": 2, "counters": {"fallbacks": 2**64 - 1, "none": 0}}, apart=["gpus"])
        self.assertEqual(len(st["gpus"]), 1)
        self.assert_message_dict(st["gpus"][0], pb.GpuInfo, {"ordinal": 0, "name": "sim0", "total_memory_bytes": 2**40,
                                                             "free_memory_bytes": 0, "uuid": "u"})
        self.assertIs(type(st["counters"]["fallbacks"]), int)
        self.assertIsInstance(self.sent("Status"), pb.StatusRequest)

        sessions = phos.sessions(socket=self.socket, pid=5)
        self.assertEqual(len(sessions), 2)
        self.assert_message_dict(sessions[0], pb.SessionInfo, {
            "session_id": 2**62 + 3, "pid": 5, "command": "app --x", "buffer_count": 4, "state": "checkpointing",
            "calls_exact": 0, "counters": {"cow_copies": 7}})
        self.assert_message_dict(sessions[1], pb.SessionInfo, {"pid": 6, "state": 42, "counters": {}})
        self.assertEqual(self.sent("ListSessions").pid, 5)

    def test_message_to_dict_fills_what_json_format_leaves_out(self):
        # Unset message fields, `optional` scalars and oneof members have
        # presence: MessageToDict omits them; the SDK's dicts show their
        # defaults, as they always did.
        from phos._convert import message_to_dict
        self.assertEqual(message_to_dict(pb.OperationResult(counters={"x": 2**63})),
                         {"image_dir": "", "pid": 0, "stall_us": 0, "total_ms": 0, "bytes_written": 0,
                          "counters": {"x": 2**63}, "exit_status": 0, "rank_pids": []})
        event = message_to_dict(pb.OperationEvent(operation_id=3, progress=pb.Progress(phase="load",
                                                                                       bytes_per_second=0.5)))
        self.assertEqual(event["operation_id"], 3)
        self.assertEqual(event["progress"], {"phase": "load", "message": "", "bytes_done": 0, "bytes_total": 0,
                                             "elapsed_ms": 0, "bytes_per_second": 0.5})
        self.assertEqual(event["failed"], {"code": 0, "message": ""})
        self.assertEqual(event["done"]["counters"], {})
        req = message_to_dict(pb.CheckpointRequest(mode=pb.MODE_COW, metric_value=float("inf")))
        self.assertEqual((req["mode"], req["keep"], req["metric_value"]), ("cow", "unspecified", float("inf")))
        self.assertEqual(req["criu"], {"shell_job": False, "tcp_established": False, "file_locks": False})

    # ---------------------------------------------------------- templates

    def test_checkpoint_leaves_running_by_default_and_kill_ends_it(self):
        self.script("Checkpoint", done(image_dir="/i/a", pid=7))
        phos.checkpoint(pid=7, socket=self.socket).wait(10)
        req = self.sent("Checkpoint")
        self.assertEqual((req.pid, req.mode, req.kill, req.leave_running), (7, pb.MODE_COW, False, True))

        self.script("Checkpoint", done(image_dir="/i/b", pid=7, counters={"killed": 1}))
        result = phos.checkpoint(pid=7, kill=True, socket=self.socket).wait(10)
        self.assertEqual(result.counters["killed"], 1)
        req = self.sent("Checkpoint")
        self.assertEqual((req.kill, req.leave_running), (True, False))

    def test_template_save(self):
        self.script("TemplateSave", progress("criu-dump"), progress("commit"),
                    done(image_dir="/t/fn", pid=12, counters={"source_ended": 1}))
        result = phos.template_save("fn", 12, mode="cow", socket=self.socket).wait(10)
        self.assertEqual((result.image_dir, result.pid, result.mode), ("/t/fn", 12, "cow"))
        self.assertEqual(result.counters["source_ended"], 1)
        req = self.sent("TemplateSave")
        self.assertEqual((req.name, req.pid, req.mode, req.leave_running), ("fn", 12, pb.MODE_COW, False))

        self.script("TemplateSave", done(image_dir="/t/fn", pid=12))
        phos.template_save("fn", 12, leave_running=True, socket=self.socket).wait(10)
        req = self.sent("TemplateSave")
        self.assertEqual((req.mode, req.leave_running), (pb.MODE_STOP, True))

    def test_template_start_detached_returns_the_pid(self):
        self.script("TemplateStart", progress("criu-restore"), done(pid=31, counters={"running_ms": 4}))
        self.assertEqual(phos.template_start("fn", socket=self.socket), 31)
        req = self.sent("TemplateStart")
        self.assertEqual((req.name, req.detach), ("fn", True))

    def test_template_start_attached_gives_pid_then_exit_status(self):
        go_on = threading.Event()
        self.script("TemplateStart", progress("running", "started pid 32"), go_on, done(pid=32, exit_status=137))
        handle = phos.template_start("fn", detach=False, socket=self.socket)
        self.assertIsInstance(handle, phos.OperationHandle)
        self.assertEqual(handle.wait_running(10), 32)
        self.assertFalse(handle.done())
        self.assertIn("template fn", repr(handle))
        go_on.set()
        self.assertEqual(handle.wait(10).exit_status, 137)
        self.assertFalse(self.sent("TemplateStart").detach)

    def test_template_start_refused(self):
        self.script("TemplateStart", failed(grpc.StatusCode.NOT_FOUND, "no template 'nope'"),
                    grpc.StatusCode.NOT_FOUND)
        with self.assertRaises(phos.PhosError) as cm:
            phos.template_start("nope", socket=self.socket)
        self.assertEqual(cm.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertIn("no template 'nope'", str(cm.exception))
        self.sent("TemplateStart")

    def test_template_list_and_remove(self):
        templates = phos.template_list(socket=self.socket)
        self.assertEqual([t["name"] for t in templates], ["fn"])
        self.assertEqual(templates[0]["running_pids"], [40, 41])
        self.assertEqual(templates[0]["bytes"], 123)
        self.sent("TemplateList")
        self.assertEqual(phos.template_remove("fn", socket=self.socket), "/t/fn")
        self.assertEqual(self.sent("TemplateRemove").name, "fn")
        with self.assertRaises(phos.PhosError) as cm:
            phos.template_remove("other", socket=self.socket)
        self.assertEqual(cm.exception.code, grpc.StatusCode.NOT_FOUND)
        self.sent("TemplateRemove")

    def test_template_bad_arguments(self):
        for call in (lambda: phos.template_save("", 1, socket=self.socket),
                     lambda: phos.template_save("fn", 0, socket=self.socket),
                     lambda: phos.template_save("fn", 1, mode="fast", socket=self.socket),
                     lambda: phos.template_start(None, socket=self.socket),
                     lambda: phos.template_remove(3, socket=self.socket)):
            with self.assertRaises(ValueError):
                call()
        self.assertTrue(self.phosd.requests.empty(), "a bad argument reached phosd")

    # ---------------------------------------------------------- migration

    def test_migrate_result_and_request(self):
        self.script("Migrate", progress("recopy"), progress("transfer"),
                    done(image_dir="127.0.0.1:7070:incoming/m", pid=900, stall_us=1500, total_ms=80,
                         bytes_written=4096, counters={"downtime_us": 1500, "source_pid": 21, "transfer_ms": 9}))
        handle = phos.migrate(21, "127.0.0.1:7070", peer_token_file=self.token_file("  s3cret \nignored\n"),
                              mode="stop", rounds=2, max_rate=1000, socket=self.socket, no_precopy=True,
                              lazy_pages=True)
        result = handle.wait(10)
        self.assertIsInstance(result, phos.MigrationResult)
        self.assertEqual((result.pid, result.source_pid, result.downtime_us), (900, 21, 1500))
        self.assertEqual((result.destination, result.mode, result.bytes_sent), ("127.0.0.1:7070", "stop", 4096))
        self.assertEqual(result.image_dir, "127.0.0.1:7070:incoming/m")
        self.assertEqual(result.counters["transfer_ms"], 9)
        self.assertEqual(handle.running_pid, 900)
        req = self.sent("Migrate")
        self.assertEqual((req.pid, req.destination, req.peer_token), (21, "127.0.0.1:7070", "s3cret"))
        self.assertEqual((req.mode, req.max_precopy_rounds, req.max_bytes_per_sec), (pb.MODE_STOP, 2, 1000))
        self.assertTrue(req.no_precopy)
        self.assertTrue(req.lazy_pages)

        self.script("Migrate", failed(grpc.StatusCode.UNAUTHENTICATED, "wrong token"),
                    grpc.StatusCode.UNAUTHENTICATED)
        with self.assertRaises(phos.PhosError) as cm:
            phos.migrate(21, "h:1", peer_token="x", socket=self.socket).wait(10)
        self.assertEqual(cm.exception.code, grpc.StatusCode.UNAUTHENTICATED)
        req = self.sent("Migrate")
        self.assertEqual((req.peer_token, req.mode, req.no_precopy, req.lazy_pages), ("x", pb.MODE_RECOPY, False, False))

    def test_migrate_refuses_bad_tokens_and_arguments(self):
        cases = {
            "does not exist": dict(peer_token_file=os.path.join(self.dir, "missing")),
            "readable by group and others (mode 0644); make it private: chmod 600":
                dict(peer_token_file=self.token_file(mode=0o644)),
            "accessible by group": dict(peer_token_file=self.token_file(mode=0o620)),
            "is empty": dict(peer_token_file=self.token_file(text="  \n")),
            "not a regular file": dict(peer_token_file=self.dir),
            "one of them": dict(),
        }
        for words, kwargs in cases.items():
            with self.subTest(words), self.assertRaises(ValueError) as cm:
                phos.migrate(21, "h:1", socket=self.socket, **kwargs)
            self.assertIn(words, str(cm.exception))
        good = self.token_file()
        for bad in [dict(mode="cow"), dict(to="nohost"), dict(rounds=-1), dict(max_rate=1.5), dict(pid=0),
                    dict(peer_token="x")]:
            args = {"pid": 21, "to": "h:1", "peer_token_file": good, **bad}
            with self.subTest(**bad), self.assertRaises(ValueError):
                phos.migrate(socket=self.socket, **args)
        self.assertTrue(self.phosd.requests.empty(), "a refused migration reached phosd")


if __name__ == "__main__":
    unittest.main()
