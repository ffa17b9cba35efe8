// The migration transport end to end (docs/migration.md): a destination
// phosd with --listen/--peer-token, `phos send-image` as the source, and raw
// PhosPeer streams for what a well-behaved source never sends.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>
#define XXH_INLINE_ALL  // header-only: the test needs one checksum, not the library
#include <xxhash.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "image/image_reader.h"
#include "image/image_writer.h"
#include "peer.grpc.pb.h"
#include "peer/data_channel.h"

namespace {

namespace fs = std::filesystem;
using phos::testing::Child;
using phos::testing::Clock;
using phos::testing::WaitForDataSocket;
using namespace std::chrono_literals;

struct Result {
  int rc;
  std::string output;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const std::string& path, const std::string& bytes, mode_t mode = 0600) {
  fs::create_directories(fs::path(path).parent_path());
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  chmod(path.c_str(), mode);
}

std::string RandomBytes(std::size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>(rng());
  return s;
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

class PeerTransferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phos_peer_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    root_ = dir_ + "/dstroot";
    incoming_ = root_ + "/incoming";
    token_ = dir_ + "/token";
    WriteFile(token_, "  s3cret-peer-token \nsecond line is ignored\n");
    StartDestination();
  }
  void TearDown() override {
    if (daemon_.pid > 0) {
      kill(daemon_.pid, SIGTERM);
      EXPECT_NE(daemon_.Wait(10000ms), -1000) << "phosd did not stop on SIGTERM";
    }
    fs::remove_all(dir_);
  }

  void StartDestination() {
    const std::string sock = dir_ + "/dst.sock";
    daemon_ = Child::Start({PHOS_BIN, "daemon", "--backend", "sim", "--pool", "0", "--socket", sock,
                            "--checkpoint-root", root_, "--listen", "127.0.0.1:0", "--peer-token", token_,
                            "--max-receive-bytes", "64M"});
    ASSERT_TRUE(daemon_.ReadUntil("(port ", 20s)) << daemon_.output;
    ASSERT_TRUE(daemon_.ReadUntil(")", 5s)) << daemon_.output;
    std::smatch m;
    const std::string out = daemon_.output;
    ASSERT_TRUE(std::regex_search(out, m, std::regex("\\(port (\\d+)\\)"))) << out;
    port_ = std::stoi(m[1]);
    // The data channel's port is logged on the line after (DataConnect):
    // read on until that whole line is in.
    const std::regex data_port("data channels on port \\d+\n");
    const auto until = Clock::now() + 20s;
    while (!std::regex_search(daemon_.output, data_port) && Clock::now() < until) {
      daemon_.ReadUntil("never printed", 100ms);
    }
    ASSERT_TRUE(std::regex_search(daemon_.output, data_port)) << daemon_.output;
    ASSERT_TRUE(WaitForDataSocket(sock, 20s)) << daemon_.output;
  }
  std::string To() const { return "127.0.0.1:" + std::to_string(port_); }

  Result Phos(std::vector<std::string> args) {
    std::vector<std::string> argv = {PHOS_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    Child c = Child::Start(argv);
    const int rc = c.Wait(120s);
    return {rc, c.output};
  }

  // A GPU-only image (ImageWriter) plus a criu/ tree standing for the
  // process part: nested directories, an empty file, a multi-chunk file.
  std::string MakeImage(const std::string& name) {
    const std::string img = dir_ + "/src/" + name;
    fs::create_directories(dir_ + "/src");
    phos::image::v1::Manifest meta;
    meta.set_session_id(7);
    meta.set_pid(4242);
    meta.set_mode("stop");
    meta.set_device_name("sim0");
    phos::image::ImageWriterOptions o;
    o.chunk_bytes = 1 << 20;
    o.io.force_pwrite = true;
    std::unique_ptr<phos::image::ImageWriter> w;
    EXPECT_TRUE(phos::image::ImageWriter::Open(img, meta, o, &w).ok());
    const std::string b0 = RandomBytes((3 << 20) + 4097, 1), b1 = RandomBytes(12345, 2);
    std::size_t i0 = 0, i1 = 0;
    EXPECT_TRUE(w->AddBuffer(0x7c0000000000, b0.size(), &i0).ok());
    EXPECT_TRUE(w->AddBuffer(0x7c0000800000, b1.size(), &i1).ok());
    EXPECT_TRUE(w->WriteBuffer(i0, b0.data()).ok());
    EXPECT_TRUE(w->WriteBuffer(i1, b1.data()).ok());
    phos::Status c = w->Commit();
    EXPECT_TRUE(c.ok()) << c.ToString();
    WriteFile(img + "/criu/pages-1.img", RandomBytes((5 << 20) + 123, 3));
    WriteFile(img + "/criu/inventory.img", "inventory", 0640);
    WriteFile(img + "/criu/empty.img", "");
    WriteFile(img + "/criu/sub/deep/core-1.img", RandomBytes(777, 4));
    return img;
  }

  // Every regular file under a and b, same relative paths, same bytes and modes.
  static void ExpectSameTree(const std::string& a, const std::string& b) {
    std::vector<std::string> fa, fb;
    for (const auto& e : fs::recursive_directory_iterator(a))
      if (e.is_regular_file()) fa.push_back(fs::relative(e.path(), a).string());
    for (const auto& e : fs::recursive_directory_iterator(b))
      if (e.is_regular_file()) fb.push_back(fs::relative(e.path(), b).string());
    std::sort(fa.begin(), fa.end());
    std::sort(fb.begin(), fb.end());
    ASSERT_EQ(fa, fb);
    for (const std::string& f : fa) {
      EXPECT_TRUE(ReadAll(a + "/" + f) == ReadAll(b + "/" + f)) << f << " differs";
      EXPECT_EQ(fs::status(a + "/" + f).permissions(), fs::status(b + "/" + f).permissions()) << f;
    }
  }

  std::unique_ptr<phos::peer::v1::PhosPeer::Stub> Stub() {
    return phos::peer::v1::PhosPeer::NewStub(grpc::CreateChannel(To(), grpc::InsecureChannelCredentials()));
  }

  // Sends `msgs` on one ReceiveImage stream (ignoring early refusals) and
  // returns the final status.
  grpc::Status RawSend(const std::vector<phos::peer::v1::ImageChunk>& msgs, const std::string& token) {
    auto stub = Stub();
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("phos-peer-token", token);
    phos::peer::v1::ReceiveImageReply reply;
    auto w = stub->ReceiveImage(&ctx, &reply);
    for (const auto& m : msgs)
      if (!w->Write(m)) break;
    w->WritesDone();
    return w->Finish();
  }
  static phos::peer::v1::ImageChunk Begin(const std::string& name, std::uint64_t total) {
    phos::peer::v1::ImageChunk c;
    c.mutable_begin()->set_name(name);
    c.mutable_begin()->set_total_bytes(total);
    c.mutable_begin()->set_file_count(1);
    return c;
  }
  static phos::peer::v1::ImageChunk Data(const std::string& path, const std::string& bytes) {
    phos::peer::v1::ImageChunk c;
    c.mutable_data()->set_path(path);
    c.mutable_data()->set_data(bytes);
    return c;
  }

  // Sends `msgs` on one Precopy stream and returns the final status.
  grpc::Status RawPrecopy(const std::vector<phos::peer::v1::PrecopyChunk>& msgs, const std::string& token,
                          phos::peer::v1::PrecopyReply* reply = nullptr) {
    auto stub = Stub();
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("phos-peer-token", token);
    phos::peer::v1::PrecopyReply r;
    auto w = stub->Precopy(&ctx, reply != nullptr ? reply : &r);
    for (const auto& m : msgs)
      if (!w->Write(m)) break;
    w->WritesDone();
    return w->Finish();
  }
  static phos::peer::v1::PrecopyChunk PrecopyBegin(const std::string& name) {
    phos::peer::v1::PrecopyChunk c;
    c.mutable_begin()->set_name(name);
    return c;
  }
  // One chunk of a copy; the first (offset 0) carries `sums` checksums of
  // 1 KiB chunks (bogus ones: for streams that must fail before they matter).
  static phos::peer::v1::PrecopyChunk PrecopyData(std::uint64_t id, std::uint64_t address, std::uint64_t bytes,
                                                  std::uint64_t offset, const std::string& data) {
    phos::peer::v1::PrecopyChunk c;
    auto* d = c.mutable_data();
    d->set_copy_id(id);
    d->set_address(address);
    d->set_bytes(bytes);
    d->set_offset(offset);
    d->set_data(data);
    if (offset == 0) {
      d->set_chunk_bytes(1024);
      for (std::uint64_t k = 0; k < (bytes + 1023) / 1024; ++k) d->add_chunk_xxh3(k);
    }
    return c;
  }
  // A whole copy with correct checksums of 1 KiB chunks, sent in pieces
  // split at `split` (0: one piece).
  static std::vector<phos::peer::v1::PrecopyChunk> PrecopyCopy(std::uint64_t id, std::uint64_t address,
                                                               const std::string& copy, std::size_t split = 0,
                                                               std::size_t chunk = 1024) {
    std::vector<phos::peer::v1::PrecopyChunk> out;
    const std::size_t cut = split == 0 ? copy.size() : split;
    out.push_back(PrecopyData(id, address, copy.size(), 0, copy.substr(0, cut)));
    auto* d = out.back().mutable_data();
    d->clear_chunk_xxh3();
    d->set_chunk_bytes(chunk);
    for (std::size_t off = 0; off < copy.size(); off += chunk) {
      d->add_chunk_xxh3(XXH3_64bits(copy.data() + off, std::min<std::size_t>(chunk, copy.size() - off)));
    }
    if (cut < copy.size()) out.push_back(PrecopyData(id, address, copy.size(), cut, copy.substr(cut)));
    return out;
  }
  static phos::peer::v1::ImageChunk Ref(const std::string& path, std::uint64_t offset, std::uint64_t id,
                                        std::uint64_t copy_offset, std::uint64_t length) {
    phos::peer::v1::ImageChunk c;
    c.mutable_data()->set_path(path);
    c.mutable_data()->set_offset(offset);
    auto* r = c.mutable_data()->mutable_ref();
    r->set_copy_id(id);
    r->set_copy_offset(copy_offset);
    r->set_length(length);
    return c;
  }

  // A TCP connection to the daemon's data channel port that has sent
  // `hello` (the magic and a ticket, or anything else); -1 on failure.
  int DataConnect(const std::string& hello) {
    std::smatch m;
    const std::string out = daemon_.output;
    if (!std::regex_search(out, m, std::regex("data channels on port (\\d+)"))) return -1;
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(std::stoi(m[1])));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{};
    tv.tv_sec = 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        !phos::peer::WriteAll(fd, hello.data(), hello.size()).ok()) {
      close(fd);
      return -1;
    }
    return fd;
  }
  // The magic and a fresh ticket from OpenDataChannel (with `token`).
  std::string Hello(const std::string& token) {
    auto stub = Stub();
    grpc::ClientContext ctx;
    ctx.AddMetadata("phos-peer-token", token);
    phos::peer::v1::OpenDataChannelRequest req;
    phos::peer::v1::OpenDataChannelReply rep;
    grpc::Status g = stub->OpenDataChannel(&ctx, req, &rep);
    EXPECT_TRUE(g.ok()) << g.error_message();
    return std::string(phos::peer::kDataChannelMagic, sizeof phos::peer::kDataChannelMagic) + rep.ticket();
  }

  std::string dir_, root_, incoming_, token_;
  int port_ = 0;
  Child daemon_;
};

// The data channel (docs/migration.md "Data channel") carries the same
// image as gRPC, byte for byte; a connection without a ticket from
// OpenDataChannel (which needs the token) is closed unanswered and a ticket
// works once; the destination's refusals reach the source with its reason;
// malformed frames are refused and leave nothing.
TEST_F(PeerTransferTest, DataChannelCarriesTheImageAndOnlyWithATicket) {
  const std::string img = MakeImage("dc");
  Result d = Phos({"send-image", img, "--to", To(), "--peer-token", token_, "--name", "dc-data", "--transport", "data"});
  ASSERT_EQ(d.rc, 0) << d.output << daemon_.output;
  EXPECT_NE(d.output.find("(data channel)"), std::string::npos) << d.output;
  Result g = Phos({"send-image", img, "--to", To(), "--peer-token", token_, "--name", "dc-grpc", "--transport", "grpc"});
  ASSERT_EQ(g.rc, 0) << g.output;
  EXPECT_NE(g.output.find("(grpc)"), std::string::npos) << g.output;
  ExpectSameTree(img, incoming_ + "/dc-data");
  ExpectSameTree(img, incoming_ + "/dc-grpc");
  EXPECT_EQ(Phos({"inspect", incoming_ + "/dc-data"}).rc, 0);

  // No ticket, a made-up one, and a wrong token asking for one.
  for (const std::string& hello : {std::string("PHOSDC01") + std::string(32, 'x'), std::string("GET / HTTP/1.1\r\n\r\n")}) {
    const int fd = DataConnect(hello);
    ASSERT_GE(fd, 0);
    shutdown(fd, SHUT_WR);  // a short hello then ends at once, not after the server's wait
    char c = 0;
    EXPECT_EQ(recv(fd, &c, 1, 0), 0) << "a connection without a valid ticket got an answer";
    close(fd);
  }
  {
    auto stub = Stub();
    grpc::ClientContext ctx;
    ctx.AddMetadata("phos-peer-token", "wrong");
    phos::peer::v1::OpenDataChannelRequest req;
    phos::peer::v1::OpenDataChannelReply rep;
    EXPECT_EQ(stub->OpenDataChannel(&ctx, req, &rep).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  const std::string tok = "s3cret-peer-token";
  const std::string hello = Hello(tok);
  auto reply_of = [](int fd) {
    phos::peer::v1::DataChannelReply r;
    phos::Status s = phos::peer::ReadFrame(phos::peer::SocketReader(fd), &r);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return r;
  };
  {
    // A ticket works once: an empty image, then the same ticket again.
    const int fd = DataConnect(hello);
    ASSERT_GE(fd, 0);
    phos::peer::v1::ImageChunk end;
    end.mutable_end();
    ASSERT_TRUE(phos::peer::WriteFrame(fd, Begin("dc-empty", 0)).ok());
    ASSERT_TRUE(phos::peer::WriteFrame(fd, end).ok());
    EXPECT_EQ(reply_of(fd).code(), 0);
    close(fd);
    const int again = DataConnect(hello);
    ASSERT_GE(again, 0);
    char c = 0;
    EXPECT_EQ(recv(again, &c, 1, 0), 0) << "a ticket was accepted twice";
    close(again);
  }
  {
    // Raw bytes beside inline data: refused, nothing left.
    const int fd = DataConnect(Hello(tok));
    ASSERT_GE(fd, 0);
    phos::peer::v1::ImageChunk bad = Data("f", "abc");
    bad.mutable_data()->set_raw_bytes(3);
    ASSERT_TRUE(phos::peer::WriteFrame(fd, Begin("dc-bad", 6)).ok());
    ASSERT_TRUE(phos::peer::WriteFrame(fd, bad).ok());
    const phos::peer::v1::DataChannelReply r = reply_of(fd);
    EXPECT_EQ(r.code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT)) << r.message();
    close(fd);
  }
  {
    // A frame length out of range.
    const int fd = DataConnect(Hello(tok));
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(phos::peer::WriteFrame(fd, Begin("dc-len", 6)).ok());
    const std::string huge("\xff\xff\xff\xff\xff\xff\xff\x7f", 8);
    ASSERT_TRUE(phos::peer::WriteAll(fd, huge.data(), huge.size()).ok());
    EXPECT_EQ(reply_of(fd).code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
    close(fd);
  }
  // Over --max-receive-bytes (64M): the source hears the destination's reason.
  fs::create_directories(dir_ + "/src/huge");
  WriteFile(dir_ + "/src/huge/gpu.img", "");
  fs::resize_file(dir_ + "/src/huge/gpu.img", 65u << 20);  // refused by its announced size
  Result big = Phos({"send-image", dir_ + "/src/huge", "--to", To(), "--peer-token", token_, "--transport", "data"});
  EXPECT_EQ(big.rc, 1) << big.output;
  EXPECT_NE(big.output.find("--max-receive-bytes"), std::string::npos) << big.output;
  std::vector<std::string> want = {"dc-data", "dc-empty", "dc-grpc"};
  EXPECT_EQ(Entries(incoming_), want);
}

TEST_F(PeerTransferTest, SendsAnImageByteIdenticalAndInspectVerifiesIt) {
  const std::string img = MakeImage("img1");
  Result r = Phos({"send-image", img, "--to", To(), "--peer-token", token_, "--chunk-size", "1M"});
  ASSERT_EQ(r.rc, 0) << r.output << daemon_.output;
  const std::string dst = incoming_ + "/img1";
  EXPECT_NE(r.output.find(dst + "\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("send-image OK"), std::string::npos) << r.output;
  EXPECT_EQ(Entries(incoming_), std::vector<std::string>{"img1"});  // no .tmp left
  ExpectSameTree(img, dst);
  Result in = Phos({"inspect", dst});
  EXPECT_EQ(in.rc, 0) << in.output;

  // --json: one object with the same facts.
  Result j = Phos({"send-image", img, "--to", To(), "--peer-token", token_, "--name", "img1-json", "--json"});
  ASSERT_EQ(j.rc, 0) << j.output;
  EXPECT_NE(j.output.find("\"path\": \"" + incoming_ + "/img1-json\""), std::string::npos) << j.output;
  EXPECT_NE(j.output.find("\"transport\": \"data channel\""), std::string::npos) << j.output;
  EXPECT_NE(j.output.find("\"name\": \"img1-json\""), std::string::npos) << j.output;
  EXPECT_NE(j.output.find("\"bytes\": "), std::string::npos) << j.output;
  ExpectSameTree(img, incoming_ + "/img1-json");
  ASSERT_TRUE(fs::remove_all(incoming_ + "/img1-json") > 0);

  // The name is taken now; another name is fine.
  Result again = Phos({"send-image", img, "--to", To(), "--peer-token", token_});
  EXPECT_EQ(again.rc, 1) << again.output;
  EXPECT_NE(again.output.find("already exists"), std::string::npos) << again.output;
  Result other = Phos({"send-image", img + "/", "--to", To(), "--peer-token", token_, "--name", "img1-b"});
  ASSERT_EQ(other.rc, 0) << other.output;
  ExpectSameTree(img, incoming_ + "/img1-b");
}

TEST_F(PeerTransferTest, WrongOrMissingTokenIsRefusedAndNothingWritten) {
  const std::string img = MakeImage("img2");
  const std::string bad = dir_ + "/bad-token";
  WriteFile(bad, "not-the-token\n");
  for (int i = 0; i < 2; ++i) {
    Result r = Phos({"send-image", img, "--to", To(), "--peer-token", bad});
    EXPECT_EQ(r.rc, 1) << r.output;
    EXPECT_NE(r.output.find("UNAUTHENTICATED"), std::string::npos) << r.output;
  }
  // A token that is a prefix of the right one, and none at all.
  EXPECT_EQ(RawSend({Begin("img2", 0)}, "s3cret-peer").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(RawSend({Begin("img2", 0)}, "").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(Entries(incoming_).empty()) << "nothing may be written for a refused peer";
  // The refused host is logged once.
  daemon_.ReadUntil("never printed", 300ms);
  std::size_t n = 0;
  for (std::size_t at = 0; (at = daemon_.output.find("peer: refused a call from ipv4:127.0.0.1", at)) !=
                           std::string::npos;
       ++at)
    ++n;
  EXPECT_EQ(n, 1u) << daemon_.output;
  // The right token (trimmed first line of the file) works.
  EXPECT_TRUE(RawSend({Begin("img2", 0), [] {
                         phos::peer::v1::ImageChunk c;
                         c.mutable_end();
                         return c;
                       }()},
                      "s3cret-peer-token")
                  .ok());
}

TEST_F(PeerTransferTest, DaemonRefusesAnUnsafeOrMissingTokenFile) {
  const std::string open_token = dir_ + "/open-token";
  WriteFile(open_token, "abc\n", 0644);
  const std::string empty = dir_ + "/empty-token";
  WriteFile(empty, " \n", 0600);
  struct Case {
    std::string file, message;
  };
  for (const Case& c : {Case{open_token, "readable by group and others (mode 0644)"},
                        Case{empty, "is empty"}, Case{dir_ + "/missing", "does not exist"}}) {
    Child d = Child::Start({PHOS_BIN, "daemon", "--backend", "sim", "--pool", "0", "--socket", dir_ + "/bad.sock",
                            "--checkpoint-root", dir_ + "/badroot", "--listen", "127.0.0.1:0", "--peer-token",
                            c.file});
    EXPECT_EQ(d.Wait(20s), 1) << d.output;
    EXPECT_NE(d.output.find(c.message), std::string::npos) << d.output;
    EXPECT_NE(d.output.find(c.file), std::string::npos) << d.output;
  }
  // --listen without a token is refused at parse time.
  Child d = Child::Start({PHOS_BIN, "daemon", "--backend", "sim", "--socket", dir_ + "/bad.sock", "--listen",
                          "127.0.0.1:0"});
  EXPECT_NE(d.Wait(20s), 0);
  EXPECT_NE(d.output.find("needs --peer-token"), std::string::npos) << d.output;
}

TEST_F(PeerTransferTest, KilledSourceLeavesOnlyTmpWhichARestartRemoves) {
  const std::string img = dir_ + "/src/big";
  WriteFile(img + "/gpu.img", RandomBytes(24 << 20, 5));
  Child src = Child::Start({PHOS_BIN, "send-image", img, "--to", To(), "--peer-token", token_, "--chunk-size", "1M",
                            "--max-rate", "4M"});
  const std::string part = incoming_ + "/big.tmp/gpu.img";
  const auto deadline = Clock::now() + 20s;
  std::error_code ec;
  while (Clock::now() < deadline && (!fs::exists(part, ec) || fs::file_size(part, ec) < (2u << 20)))
    std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(fs::exists(part)) << daemon_.output;
  kill(src.pid, SIGKILL);
  src.Wait(5s);
  ASSERT_TRUE(daemon_.ReadUntil("went away", 10s)) << daemon_.output;
  EXPECT_EQ(Entries(incoming_), std::vector<std::string>{"big.tmp"});
  EXPECT_LT(fs::file_size(part), 24u << 20);

  kill(daemon_.pid, SIGTERM);
  ASSERT_EQ(daemon_.Wait(10s), 0) << daemon_.output;
  StartDestination();
  EXPECT_TRUE(Entries(incoming_).empty()) << daemon_.output;
  EXPECT_NE(daemon_.output.find("removed incomplete checkpoint " + incoming_ + "/big.tmp"), std::string::npos)
      << daemon_.output;
}

TEST_F(PeerTransferTest, RefusesPathTraversalBadNamesOversizeAndDamage) {
  const std::string tok = "s3cret-peer-token";
  for (const std::string path : {"../escape", "/tmp/abs-escape", "a/../../escape", "a//b", "./x", ""}) {
    grpc::Status s = RawSend({Begin("evil", 100), Data(path, "x")}, tok);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << path << ": " << s.error_message();
  }
  EXPECT_FALSE(fs::exists(incoming_ + "/../escape"));
  EXPECT_FALSE(fs::exists(root_ + "/escape"));
  EXPECT_FALSE(fs::exists("/tmp/abs-escape"));
  for (const std::string name : {"../up", "a/b", "x.tmp", ".", ""}) {
    grpc::Status s = RawSend({Begin(name, 1)}, tok);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << name << ": " << s.error_message();
  }
  EXPECT_FALSE(fs::exists(root_ + "/up"));
  // Over --max-receive-bytes (64M) announced, and more than announced sent.
  grpc::Status big = RawSend({Begin("big", 100u << 20)}, tok);
  EXPECT_EQ(big.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << big.error_message();
  EXPECT_NE(big.error_message().find("--max-receive-bytes"), std::string::npos) << big.error_message();
  grpc::Status over = RawSend({Begin("over", 4), Data("f", "12345678")}, tok);
  EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << over.error_message();
  // A wrong checksum.
  phos::peer::v1::ImageChunk end;
  end.mutable_file_end()->set_path("f");
  end.mutable_file_end()->set_size(3);
  end.mutable_file_end()->set_xxh3(12345);
  grpc::Status damaged = RawSend({Begin("damaged", 3), Data("f", "abc"), end}, tok);
  EXPECT_EQ(damaged.error_code(), grpc::StatusCode::DATA_LOSS) << damaged.error_message();
  // Refusals leave nothing behind.
  EXPECT_TRUE(Entries(incoming_).empty());
}

// Pre-copy (PhosPeer.Precopy + PrecopyRef, docs/migration.md "Pre-copy
// streaming"): copies sent ahead fill the image's file where the stream
// refers to them; a newer copy of an address supersedes the older; refs to
// superseded, unknown or out-of-range copies, refs with no pre-copy, and a
// pre-copy over --max-receive-bytes are refused and leave nothing.
TEST_F(PeerTransferTest, PrecopyRefsFillTheFileAndBadRefsAreRefused) {
  const std::string tok = "s3cret-peer-token";
  const std::string old_copy = RandomBytes(3000, 7), new_copy = RandomBytes(3000, 8), other = RandomBytes(500, 9);
  const std::string streamed = RandomBytes(10000, 11);
  auto precopy = [&](const std::string& name) {
    phos::peer::v1::PrecopyReply reply;
    std::vector<phos::peer::v1::PrecopyChunk> msgs = {PrecopyBegin(name)};
    for (auto part : {PrecopyCopy(1, 0x1000, old_copy, 1000, 4096), PrecopyCopy(2, 0x9000, other, 0, 4096),
                      PrecopyCopy(3, 0x1000, new_copy, 2048, 4096)}) {
      msgs.insert(msgs.end(), part.begin(), part.end());
    }
    grpc::Status g = RawPrecopy(msgs, tok, &reply);
    EXPECT_TRUE(g.ok()) << g.error_message();
    EXPECT_EQ(reply.copies(), 2u) << "copy 1 was superseded by copy 3";
    EXPECT_EQ(reply.bytes(), 3500u);
  };
  precopy("pre");
  // The source's image, as a migration writes it: buffers 0x1000 and 0x9000
  // pre-copied (holes in gpu.img, only their checksums in the manifest),
  // 0x5000 written.
  const std::string src = dir_ + "/src/pre";
  fs::create_directories(dir_ + "/src");
  {
    phos::image::v1::Manifest meta;
    meta.set_session_id(7);
    meta.set_pid(4242);
    meta.set_mode("recopy");
    phos::image::ImageWriterOptions o;
    o.chunk_bytes = 4096;
    o.io.force_pwrite = true;
    o.durable = false;
    std::unique_ptr<phos::image::ImageWriter> w;
    ASSERT_TRUE(phos::image::ImageWriter::Open(src, meta, o, &w).ok());
    std::size_t ia = 0, ib = 0, ic = 0;
    ASSERT_TRUE(w->AddBuffer(0x1000, new_copy.size(), &ia).ok());
    ASSERT_TRUE(w->AddBuffer(0x5000, streamed.size(), &ib).ok());
    ASSERT_TRUE(w->AddBuffer(0x9000, other.size(), &ic).ok());
    ASSERT_TRUE(w->WriteElsewhere(ia, 0, {XXH3_64bits(new_copy.data(), new_copy.size())}).ok());
    ASSERT_TRUE(w->WriteBuffer(ib, streamed.data()).ok());
    ASSERT_TRUE(w->WriteElsewhere(ic, 0, {XXH3_64bits(other.data(), other.size())}).ok());
    phos::Status c = w->Commit();
    ASSERT_TRUE(c.ok()) << c.ToString();
  }
  phos::image::v1::Manifest m;
  ASSERT_TRUE(phos::image::ReadManifest(src, &m).ok());
  std::map<std::uint64_t, std::uint64_t> ref_of = {{0x1000, 3}, {0x9000, 2}};  // address -> copy id
  std::map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>> refs;     // file offset -> (bytes, copy)
  for (const auto& b : m.buffers()) {
    if (ref_of.count(b.device_address())) refs[b.extent_offset()] = {b.bytes(), ref_of[b.device_address()]};
  }
  ASSERT_EQ(refs.size(), 2u);
  // The stream: gpu.img (streamed parts + references), then the manifest.
  const std::string gpu = ReadAll(src + "/gpu.img"), manifest = ReadAll(src + "/manifest");
  std::vector<phos::peer::v1::ImageChunk> msgs = {Begin("pre", gpu.size() + manifest.size())};
  msgs[0].mutable_begin()->set_file_count(2);
  std::string carried;
  for (std::uint64_t off = 0; off < gpu.size();) {
    auto next = refs.lower_bound(off);
    if (next != refs.end() && next->first == off) {
      msgs.push_back(Ref("gpu.img", off, next->second.second, 0, next->second.first));
      off += next->second.first;
      continue;
    }
    const std::uint64_t stop = next == refs.end() ? gpu.size() : next->first;
    msgs.push_back(Data("gpu.img", gpu.substr(off, stop - off)));
    msgs.back().mutable_data()->set_offset(off);
    carried += gpu.substr(off, stop - off);
    off = stop;
  }
  phos::peer::v1::ImageChunk end;
  end.mutable_file_end()->set_path("gpu.img");
  end.mutable_file_end()->set_size(gpu.size());
  end.mutable_file_end()->set_xxh3(XXH3_64bits(carried.data(), carried.size()));  // the carried bytes only
  msgs.push_back(end);
  msgs.push_back(Data("manifest", manifest));
  end.mutable_file_end()->set_path("manifest");
  end.mutable_file_end()->set_size(manifest.size());
  end.mutable_file_end()->set_xxh3(XXH3_64bits(manifest.data(), manifest.size()));
  msgs.push_back(end);
  phos::peer::v1::ImageChunk image_end;
  image_end.mutable_end()->set_file_count(2);
  image_end.mutable_end()->set_total_bytes(gpu.size() + manifest.size());
  msgs.push_back(image_end);
  grpc::Status g = RawSend(msgs, tok);
  ASSERT_TRUE(g.ok()) << g.error_message();
  // The destination's image reads back whole, every chunk verified.
  std::unique_ptr<phos::image::ImageReader> reader;
  phos::Status rs = phos::image::ImageReader::Open(incoming_ + "/pre", {}, &reader);
  ASSERT_TRUE(rs.ok()) << rs.ToString();
  std::map<std::uint64_t, std::string> want = {{0x1000, new_copy}, {0x5000, streamed}, {0x9000, other}};
  ASSERT_EQ(reader->buffer_count(), 3u);
  for (std::size_t k = 0; k < reader->buffer_count(); ++k) {
    const auto& e = reader->manifest().buffers(static_cast<int>(k));
    std::string got(e.bytes(), '\0');
    rs = reader->ReadBuffer(k, got.data());
    ASSERT_TRUE(rs.ok()) << rs.ToString();
    EXPECT_TRUE(got == want[e.device_address()]) << "buffer " << e.device_address();
  }
  EXPECT_TRUE(reader->VerifyAll().ok());
  // The pre-copy was claimed by that image: a second image cannot use it.
  g = RawSend({Begin("pre2", 100), Ref("gpu.img", 0, 3, 0, 100)}, tok);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << g.error_message();
  EXPECT_NE(g.error_message().find("no pre-copy"), std::string::npos) << g.error_message();
  // A reference in any other file than gpu.img.
  precopy("other");
  g = RawSend({Begin("other", 100), Ref("criu/pages-1.img", 0, 3, 0, 100)}, tok);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << g.error_message();

  precopy("bad");
  const std::vector<std::pair<phos::peer::v1::ImageChunk, grpc::StatusCode>> bad = {
      {Ref("gpu.img", 0, 1, 0, 100), grpc::StatusCode::NOT_FOUND},           // superseded
      {Ref("gpu.img", 0, 99, 0, 100), grpc::StatusCode::NOT_FOUND},          // never sent
      {Ref("gpu.img", 0, 3, 2990, 11), grpc::StatusCode::INVALID_ARGUMENT},  // past the copy's end
      {Ref("gpu.img", 0, 3, 0, 0), grpc::StatusCode::INVALID_ARGUMENT},      // empty
  };
  for (const auto& [ref, code] : bad) {
    precopy("bad");
    g = RawSend({Begin("bad", 5000), ref}, tok);
    EXPECT_EQ(g.error_code(), code) << ref.DebugString() << ": " << g.error_message();
  }
  // Broken pre-copy streams: ids going back, a copy cut short, over the limit (64M).
  g = RawPrecopy({PrecopyBegin("x"), PrecopyCopy(2, 1, "0123456789")[0], PrecopyData(1, 2, 1, 0, "a")}, tok);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << g.error_message();
  g = RawPrecopy({PrecopyBegin("x"), PrecopyData(1, 1, 10, 0, "01234")}, tok);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << g.error_message();
  g = RawPrecopy({PrecopyBegin("x"), PrecopyData(1, 1, 65u << 20, 0, "0")}, tok);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << g.error_message();
  EXPECT_NE(g.error_message().find("--max-receive-bytes"), std::string::npos) << g.error_message();
  // No checksums, and bytes that do not match theirs (damaged in transit).
  phos::peer::v1::PrecopyChunk bare = PrecopyData(1, 1, 4, 0, "abcd");
  bare.mutable_data()->clear_chunk_xxh3();
  g = RawPrecopy({PrecopyBegin("x"), bare}, tok);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << g.error_message();
  EXPECT_NE(g.error_message().find("checksums"), std::string::npos) << g.error_message();
  std::vector<phos::peer::v1::PrecopyChunk> damaged = PrecopyCopy(1, 1, RandomBytes(3000, 10), 1500);
  damaged.back().mutable_data()->mutable_data()->at(7) ^= 1;
  damaged.insert(damaged.begin(), PrecopyBegin("x"));
  g = RawPrecopy(damaged, tok);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::DATA_LOSS) << g.error_message();
  EXPECT_NE(g.error_message().find("chunk 1 does not match"), std::string::npos) << g.error_message();
  // Those failed pre-copies are forgotten: a ref to them finds none.
  g = RawSend({Begin("x", 100), Ref("gpu.img", 0, 1, 0, 1)}, tok);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << g.error_message();
  // And the token is checked.
  g = RawPrecopy({PrecopyBegin("y")}, "wrong");
  EXPECT_EQ(g.error_code(), grpc::StatusCode::UNAUTHENTICATED) << g.error_message();
  EXPECT_EQ(Entries(incoming_), std::vector<std::string>{"pre"});
  EXPECT_TRUE(Entries(root_ + "/precopy").empty()) << "pre-copy files left behind";
}

// Pre-copies of runs of chunks (the source's dirtiness is per image chunk):
// a shorter copy at the address of a longer one holds only its first
// chunks, so it does not supersede the longer one — both stay, and a
// reference into the longer one's other chunks still resolves; a copy at
// least as long does supersede.
TEST_F(PeerTransferTest, AShorterPrecopyAtTheSameAddressKeepsTheLongerOne) {
  const std::string tok = "s3cret-peer-token";
  const std::string whole = RandomBytes(8192, 21), first = RandomBytes(4096, 22), again = RandomBytes(8192, 23);
  phos::peer::v1::PrecopyReply reply;
  std::vector<phos::peer::v1::PrecopyChunk> msgs = {PrecopyBegin("runs")};
  for (auto part : {PrecopyCopy(1, 0x10000, whole, 0, 4096), PrecopyCopy(2, 0x10000, first, 0, 4096)}) {
    msgs.insert(msgs.end(), part.begin(), part.end());
  }
  grpc::Status g = RawPrecopy(msgs, tok, &reply);
  ASSERT_TRUE(g.ok()) << g.error_message();
  EXPECT_EQ(reply.copies(), 2u) << "copy 2 (chunk 0 only) must not drop copy 1 (chunks 0-1)";
  EXPECT_EQ(reply.bytes(), 12288u);
  msgs = {PrecopyBegin("runs2")};
  for (auto part : {PrecopyCopy(1, 0x10000, first, 0, 4096), PrecopyCopy(2, 0x10000, again, 0, 4096)}) {
    msgs.insert(msgs.end(), part.begin(), part.end());
  }
  g = RawPrecopy(msgs, tok, &reply);
  ASSERT_TRUE(g.ok()) << g.error_message();
  EXPECT_EQ(reply.copies(), 1u) << "copy 2 covers every chunk of copy 1";
  EXPECT_EQ(reply.bytes(), 8192u);
}

}  // namespace
