#include "rpc.h"

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <mutex>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <set>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace pr {

// ggml-rpc's wire facts used by the probe (protocol 7.x, ggml-rpc.cpp and transport.h).
static constexpr uint8_t RPC_CMD_HELLO = 14;
static constexpr size_t RPC_CAPS = 24;
static constexpr uint8_t RPC_MAJOR = 7;

using add_server_fn = ggml_backend_reg_t (*)(const char * endpoint);
using start_server_fn = void (*)(const char * endpoint, const char * cache_dir, size_t n_threads, size_t n_devices,
                                 ggml_backend_dev_t * devices);

static ggml_backend_reg_t rpc_reg() {
    ggml_backend_reg_t reg = ggml_backend_reg_by_name("RPC");
    if (!reg) {
        fail(PR_ERR_BACKEND, "this ggml has no RPC backend (libggml-rpc): reinstall llama-cpp-python with "
                             "CMAKE_ARGS=\"-DGGML_RPC=on\" (see README, Devices and RPC)");
    }
    return reg;
}

template <typename F>
static F rpc_fn(const char * name) {
    F f = (F) ggml_backend_reg_get_proc_address(rpc_reg(), name);
    if (!f) fail(PR_ERR_BACKEND, "ggml's RPC backend does not export %s", name);
    return f;
}

std::vector<std::string> parse_endpoints(const char * list) {
    std::vector<std::string> out;
    if (!list) return out;
    std::string s(list);
    size_t start = 0;
    while (start <= s.size()) {
        size_t end = s.find(',', start);
        if (end == std::string::npos) end = s.size();
        std::string e = s.substr(start, end - start);
        e.erase(0, e.find_first_not_of(" \t"));
        e.erase(e.find_last_not_of(" \t") + 1);
        if (!e.empty()) {
            const size_t colon = e.rfind(':');
            char * rest = nullptr;
            const long port = colon == std::string::npos ? -1 : strtol(e.c_str() + colon + 1, &rest, 10);
            if (colon == 0 || colon == std::string::npos || port < 1 || port > 65535 || !rest || *rest) {
                fail(PR_ERR_INVALID_ARG, "bad RPC server '%s': expected host:port", e.c_str());
            }
            for (const auto & o : out) {
                if (o == e) fail(PR_ERR_INVALID_ARG, "RPC server '%s' is listed twice", e.c_str());
            }
            out.push_back(e);
        }
        start = end + 1;
    }
    return out;
}

// ---- probing a server with a bounded connect (and HELLO) -------------------------------------

struct fd_closer { int fd; ~fd_closer() { if (fd >= 0) close(fd); } };

// Empty when the server answered as asked; otherwise why not.
static std::string probe(const std::string & endpoint, int timeout_ms, bool hello) {
    const size_t colon = endpoint.rfind(':');
    const std::string host = endpoint.substr(0, colon), port = endpoint.substr(colon + 1);
    addrinfo hints{};
    hints.ai_family = AF_INET;   // ggml-rpc connects over IPv4 only
    hints.ai_socktype = SOCK_STREAM;
    addrinfo * ai = nullptr;
    const int gai = getaddrinfo(host.c_str(), port.c_str(), &hints, &ai);
    if (gai != 0 || !ai) return std::string("cannot resolve '") + host + "': " + gai_strerror(gai);
    std::unique_ptr<addrinfo, void (*)(addrinfo *)> ai_guard(ai, freeaddrinfo);

    fd_closer s{socket(AF_INET, SOCK_STREAM, 0)};
    if (s.fd < 0) return std::string("socket: ") + strerror(errno);
    fcntl(s.fd, F_SETFL, fcntl(s.fd, F_GETFL) | O_NONBLOCK);
    if (connect(s.fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) return strerror(errno);
        pollfd p{s.fd, POLLOUT, 0};
        const int r = poll(&p, 1, timeout_ms);
        if (r == 0) return "no answer to connect within " + std::to_string(timeout_ms) + " ms";
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (r < 0 || err != 0) return strerror(r < 0 ? errno : err);
    }
    if (!hello) return "";

    // HELLO: | cmd (1) | size (8) | caps (24) |  ->  | size (8) | major minor patch pad caps (28) |
    uint8_t req[1 + 8 + RPC_CAPS] = {RPC_CMD_HELLO};
    const uint64_t req_size = RPC_CAPS;
    memcpy(req + 1, &req_size, 8);
    uint8_t rsp[8 + 4 + RPC_CAPS];
    auto io = [&](bool out, uint8_t * buf, size_t n) -> std::string {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
        size_t done = 0;
        while (done < n) {
            const int left = (int) std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
            pollfd p{s.fd, (short) (out ? POLLOUT : POLLIN), 0};
            if (left <= 0 || poll(&p, 1, left) <= 0) {
                return "connected, but no answer to ggml-rpc's HELLO within " + std::to_string(timeout_ms) +
                       " ms (a ggml RPC server serves one client at a time: is another process using it?)";
            }
            const ssize_t k = out ? send(s.fd, buf + done, n - done, MSG_NOSIGNAL) : recv(s.fd, buf + done, n - done, 0);
            if (k <= 0) return "the connection closed during ggml-rpc's HELLO: not a ggml RPC server?";
            done += (size_t) k;
        }
        return "";
    };
    std::string e = io(true, req, sizeof(req));
    if (e.empty()) e = io(false, rsp, sizeof(rsp));
    if (!e.empty()) return e;
    uint64_t rsp_size = 0;
    memcpy(&rsp_size, rsp, 8);
    if (rsp_size != 4 + RPC_CAPS) return "the answer to HELLO is not ggml-rpc's: not a ggml RPC server?";
    if (rsp[8] != RPC_MAJOR) {
        return "ggml-rpc protocol " + std::to_string(rsp[8]) + "." + std::to_string(rsp[9]) + " on the server, " +
               std::to_string(RPC_MAJOR) + ".x here: use the same llama.cpp version on both ends";
    }
    return "";
}

// ---- failures: the abort hook and the dead endpoints ----------------------------------------

static std::mutex g_mu;                  // guards everything below
static std::condition_variable g_cv;     // a call finished, or an RPC failure happened
static uint64_t g_failures = 0;          // ggml-rpc aborts intercepted so far
static std::set<std::string> g_dead;     // endpoints found dead
static std::set<std::string> g_added;    // endpoints ggml-rpc has connected to through us
static std::set<std::string> g_registered;
static ggml_abort_callback_t g_prev_abort = nullptr;

static void on_ggml_abort(const char * msg) {
    if (msg && strstr(msg, "ggml-rpc")) {
        fprintf(stderr, "pyriver: %s\npyriver: the call that used this RPC server fails; the process goes on\n", msg);
        {
            std::lock_guard<std::mutex> lk(g_mu);
            g_failures++;
        }
        g_cv.notify_all();
        for (;;) pause();   // park the failing ggml-rpc thread: returning would abort the process
    }
    if (g_prev_abort) g_prev_abort(msg);
    else fprintf(stderr, "%s\n", msg ? msg : "ggml abort");
}

static void install_abort_hook() {
    static std::once_flag once;
    std::call_once(once, [] { g_prev_abort = ggml_set_abort_callback(on_ggml_abort); });
}

bool rpc_endpoint_dead(const std::string & endpoint) {
    std::lock_guard<std::mutex> lk(g_mu);
    return g_dead.count(endpoint) > 0;
}

[[noreturn]] static void fail_dead(const std::string & e) {
    fail(PR_ERR_BACKEND, "RPC server %s went away or stopped answering earlier in this process; ggml-rpc cannot reconnect to it "
                         "(one connection per server and process): restart the process", e.c_str());
}

// Endpoints of the list that refuse a connection now (a few tries: a killed server's listening
// socket may outlive its client connection by a moment).
static std::vector<std::string> find_dead(const std::vector<std::string> & endpoints) {
    std::vector<std::string> dead;
    for (int attempt = 0; attempt < 5 && dead.empty(); attempt++) {
        if (attempt) std::this_thread::sleep_for(std::chrono::milliseconds(200));
        for (const auto & e : endpoints) {
            if (rpc_endpoint_dead(e) || !probe(e, 1000, false).empty()) dead.push_back(e);
        }
    }
    return dead;
}

void rpc_guarded(const std::vector<std::string> & endpoints, int timeout_ms, bool & broken, const std::function<void()> & f) {
    if (endpoints.empty()) {
        f();
        return;
    }
    install_abort_hook();
    for (const auto & e : endpoints) {
        if (rpc_endpoint_dead(e)) {
            broken = true;
            fail_dead(e);
        }
    }
    struct state { bool done = false; std::exception_ptr err; };
    auto st = std::make_shared<state>();
    std::unique_lock<std::mutex> lk(g_mu);
    uint64_t seen = g_failures;
    std::thread([st, f] {
        std::exception_ptr err;
        try {
            f();
        } catch (...) {
            err = std::current_exception();
        }
        {
            std::lock_guard<std::mutex> g(g_mu);
            st->err = err;
            st->done = true;
        }
        g_cv.notify_all();
    }).detach();

    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms > 0 ? timeout_ms : 0);
    while (!st->done) {
        if (g_failures != seen) {
            seen = g_failures;
            lk.unlock();
            const std::vector<std::string> dead = find_dead(endpoints);
            lk.lock();
            if (!dead.empty() && !st->done) {
                for (const auto & e : dead) g_dead.insert(e);
                broken = true;
                fail(PR_ERR_BACKEND, "RPC server %s went away (connection lost); this model and its contexts cannot be used any more",
                     dead[0].c_str());
            }
            continue;
        }
        if (timeout_ms > 0) {
            if (g_cv.wait_until(lk, deadline) == std::cv_status::timeout && !st->done && g_failures == seen) {
                // Which server hangs is unknown (a healthy one is busy with its connection too),
                // and ggml-rpc queues every later request behind the unanswered one: all are lost.
                broken = true;
                std::string list;
                for (const auto & e : endpoints) {
                    list += (list.empty() ? "" : ",") + e;
                    g_dead.insert(e);
                }
                fail(PR_ERR_BACKEND, "no answer from RPC server(s) %s within %d ms; this model and its contexts cannot be used any more",
                     list.c_str(), timeout_ms);
            }
        } else {
            g_cv.wait(lk);
        }
    }
    lk.unlock();
    if (st->err) std::rethrow_exception(st->err);
}

// ---- servers ----------------------------------------------------------------------------------

std::vector<ggml_backend_dev_t> rpc_add_servers(const std::vector<std::string> & endpoints, int timeout_ms) {
    std::vector<ggml_backend_dev_t> devs;
    if (endpoints.empty()) return devs;
    const auto add = rpc_fn<add_server_fn>("ggml_backend_rpc_add_server");
    install_abort_hook();
    // Shorter than the call's own timeout, so that the probe, not the guard, names the problem.
    const int probe_ms = timeout_ms > 0 ? std::max(1, std::min(timeout_ms / 2, 5000)) : 5000;
    for (const auto & e : endpoints) {
        if (rpc_endpoint_dead(e)) fail_dead(e);
        bool first;
        {
            std::lock_guard<std::mutex> lk(g_mu);
            first = g_added.count(e) == 0;
        }
        // The first time, a full HELLO: ggml-rpc aborts on a refused connection or a bad handshake.
        // Later, ggml-rpc's connection is open and the server busy with it: a connect suffices.
        const std::string why = probe(e, probe_ms, first);
        if (!why.empty()) fail(PR_ERR_BACKEND, "cannot use RPC server %s: %s", e.c_str(), why.c_str());
        ggml_backend_reg_t reg = add(e.c_str());
        if (!reg || ggml_backend_reg_dev_count(reg) == 0) fail(PR_ERR_BACKEND, "RPC server %s has no devices", e.c_str());
        {
            std::lock_guard<std::mutex> lk(g_mu);
            g_added.insert(e);
        }
        for (size_t i = 0; i < ggml_backend_reg_dev_count(reg); i++) devs.push_back(ggml_backend_reg_dev_get(reg, i));
    }
    return devs;
}

void rpc_register_servers(const std::vector<std::string> & endpoints, int timeout_ms) {
    bool broken = false;
    rpc_guarded(endpoints, timeout_ms, broken, [&] {
        for (const auto & e : endpoints) {
            const std::vector<ggml_backend_dev_t> devs = rpc_add_servers({e}, timeout_ms);
            std::lock_guard<std::mutex> lk(g_mu);
            if (!g_registered.insert(e).second) continue;
            for (ggml_backend_dev_t d : devs) ggml_backend_device_register(d);
        }
    });
}

// The devices a server offers: the GPUs if there are any (not RPC devices of its own), else the CPU.
static std::vector<ggml_backend_dev_t> server_devices() {
    std::vector<ggml_backend_dev_t> gpus, cpu;
    for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
        ggml_backend_dev_t d = ggml_backend_dev_get(i);
        const auto t = ggml_backend_dev_type(d);
        if (t == GGML_BACKEND_DEVICE_TYPE_CPU) cpu.push_back(d);
        else if ((t == GGML_BACKEND_DEVICE_TYPE_GPU || t == GGML_BACKEND_DEVICE_TYPE_IGPU) &&
                 strcmp(ggml_backend_reg_name(ggml_backend_dev_backend_reg(d)), "RPC") != 0) {
            gpus.push_back(d);
        }
    }
    return gpus.empty() ? cpu : gpus;
}

void rpc_start_server(const char * endpoint, int n_threads, const char * cache_dir) {
    const std::vector<std::string> eps = parse_endpoints(endpoint);
    if (eps.size() != 1) fail(PR_ERR_INVALID_ARG, "the server needs one host:port");
    if (n_threads < 1) fail(PR_ERR_INVALID_ARG, "n_threads must be >= 1");
    const auto start = rpc_fn<start_server_fn>("ggml_backend_rpc_start_server");
    // Bind once ourselves first: ggml only prints why it could not listen.
    {
        const std::string & e = eps[0];
        const size_t colon = e.rfind(':');
        addrinfo hints{};
        hints.ai_family = AF_INET;
        hints.ai_socktype = SOCK_STREAM;
        addrinfo * ai = nullptr;
        if (getaddrinfo(e.substr(0, colon).c_str(), e.substr(colon + 1).c_str(), &hints, &ai) != 0 || !ai) {
            fail(PR_ERR_INVALID_ARG, "cannot resolve the host of '%s'", e.c_str());
        }
        fd_closer s{socket(AF_INET, SOCK_STREAM, 0)};
        int one = 1;
        setsockopt(s.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        const int r = bind(s.fd, ai->ai_addr, ai->ai_addrlen);
        const int err = errno;
        freeaddrinfo(ai);
        if (r != 0) fail(PR_ERR_IO, "cannot listen on %s: %s", e.c_str(), strerror(err));
    }
    std::vector<ggml_backend_dev_t> devs = server_devices();
    if (devs.empty()) fail(PR_ERR_BACKEND, "ggml has no device to serve");
    start(eps[0].c_str(), cache_dir && *cache_dir ? cache_dir : nullptr, (size_t) n_threads, devs.size(), devs.data());
    fail(PR_ERR_BACKEND, "the RPC server at %s stopped", eps[0].c_str());
}

} // namespace pr
