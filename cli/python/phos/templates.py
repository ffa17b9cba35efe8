"""Serverless templates (docs/templates.md): a process saved under a name,
new instances started from it. What `phos template save|start|list|rm` does.

Saving and starting are long operations (OperationHandle, handle.py);
listing and removing are plain calls.
"""
from ._channel import call
from ._convert import message_to_dict
from ._stubs import pb
from .handle import check_pid, start

_SAVE_MODES = {"stop": pb.MODE_STOP, "cow": pb.MODE_COW, "recopy": pb.MODE_RECOPY}
# Removing deletes the template's directory and its in-memory copy (GBs for
# a large model): longer than a query.
REMOVE_TIMEOUT_S = 120.0


def _check_name(name):
    # The rules ([A-Za-z0-9_.-], ...) are phosd's (TemplateStore::CheckName),
    # which answers INVALID_ARGUMENT naming them; only the type is checked here.
    if not isinstance(name, str) or not name:
        raise ValueError("a template name must be a non-empty str (got %r)" % (name,))
    return name


def template_save(name, pid, mode="stop", leave_running=False, socket=None):
    """Starts saving the process `pid` (running under `phos run`) as template
    `name`; returns an OperationHandle.

    A whole-process checkpoint (GPU state + CRIU; phosd must run as root)
    committed under `name`, replacing a template of that name only once the
    new one is complete. Then, unless leave_running, phosd ends the process
    (SIGKILL): instances need its device addresses. handle.wait() returns an
    OperationResult: image_dir is the template's directory, pid the source,
    counters template_bytes, criu_dump_ms, source_ended, cached, ...

    Args:
        name: the template's name (1-100 of A-Z a-z 0-9 _ . -, not starting
            with '.'; phosd refuses others with INVALID_ARGUMENT).
        pid: the source process.
        mode: checkpoint mode, "stop" (default), "cow" or "recopy" (as
            phos.checkpoint).
        leave_running: keep the source running. It holds the template's
            device addresses: no instance can start on this phosd until it
            ends.
        socket: phosd's control socket; default $PHOS_SOCKET, else
            /run/phos/phosd.sock.

    Raises:
        ValueError: a bad argument (unknown mode, pid not a positive int,
            name not a non-empty str).
        PhosError: UNAVAILABLE when no phosd answers (at once); the save's
            failures (NOT_FOUND: no session for the pid; INVALID_ARGUMENT: a
            bad name) come from wait().
    """
    _check_name(name)
    pid = check_pid(pid)
    if mode not in _SAVE_MODES:
        raise ValueError("mode must be one of %s (got %r)" % (", ".join(sorted(_SAVE_MODES)), mode))
    req = pb.TemplateSaveRequest(name=name, pid=pid, mode=_SAVE_MODES[mode], leave_running=bool(leave_running))
    return start("TemplateSave", req, socket, pid, mode)


def template_start(name, detach=True, socket=None, timeout=None):
    """Starts a new instance of template `name` (from phosd's in-memory copy).

    The instance is a new process resuming where the template was taken
    (a new pid when the source ran in its own pid namespace, `phos run`'s
    default as root; else the source's pid). phosd reaps it. One instance
    of a template at a time per phosd: a start while one runs fails with
    FAILED_PRECONDITION naming its pid.

    Args:
        name: the template.
        detach: True (default): returns the instance's pid as soon as it
            runs. False: returns an OperationHandle at once;
            handle.wait_running() gives the pid as soon as it runs,
            handle.wait() an OperationResult once the instance has exited,
            whose exit_status is its exit status (exit code, or 128 + the
            signal). counters: criu_restore_ms, gpu_restore_us, running_ms,
            from_cache, cache_fill_ms, ...
        socket: phosd's control socket (default as for template_save()).
        timeout: detach=True only: seconds to wait for the instance to run
            (None: as long as it takes). The start goes on after a timeout.

    Returns:
        detach=True: the instance's pid (int). detach=False: an
        OperationHandle.

    Raises:
        ValueError: name is not a non-empty str.
        PhosError: detach=True: the start failed (NOT_FOUND: no such
            template; FAILED_PRECONDITION: an earlier instance or the source
            still runs; UNAVAILABLE: no phosd). detach=False: UNAVAILABLE at
            once, the rest from the handle.
        TimeoutError: detach=True, not running after `timeout` seconds.
    """
    _check_name(name)
    req = pb.TemplateStartRequest(name=name, detach=bool(detach))
    handle = start("TemplateStart", req, socket, 0, "detached" if detach else "attached",
                   subject="template " + name)
    if not detach:
        return handle
    return handle.wait(timeout).pid


def template_list(socket=None):
    """The templates phosd holds, as a list of dicts (TemplateInfo in
    proto/phos.proto): name, dir, cache_dir (its in-memory copy, "" if none),
    bytes, source_pid, source_command, saved_unix_ms, mode, running_pids
    (the processes holding its device addresses: running instances, and the
    source if saved with leave_running)."""
    reply = call("TemplateList", "TemplateList", pb.TemplateListRequest(), socket)
    return [message_to_dict(t) for t in reply.templates]


def template_remove(name, socket=None):
    """Removes template `name` (its directory and in-memory copy; running
    instances are not affected). Returns the directory removed.

    Raises:
        ValueError: name is not a non-empty str.
        PhosError: NOT_FOUND when there is no such template.
    """
    _check_name(name)
    reply = call("TemplateRemove", "TemplateRemove", pb.TemplateRemoveRequest(name=name), socket,
                 timeout_s=REMOVE_TIMEOUT_S)
    return reply.removed_dir
