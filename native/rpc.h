// ggml's RPC devices (ggml-rpc: tensors and compute on a server process, reached over TCP), and
// what makes them safe to use from a library: servers are checked before ggml connects to them,
// and every call that may talk to a server runs where a dead server cannot take the process down.
//
// ggml-rpc's client aborts the process (GGML_ABORT in its dispatcher thread) when a server's
// socket breaks, and blocks forever when a server stops answering. pyriver installs a ggml abort
// callback that, for ggml-rpc's aborts only, parks the failing dispatcher thread instead of
// returning into abort(); calls run on a worker thread that the caller abandons when a server of
// the call is found dead (or after a timeout). The objects of that call (model, context) are
// then broken: they are never freed (their remote buffers cannot be), and the server's endpoint
// cannot be used again in this process (ggml-rpc keeps one connection per endpoint and process).
#pragma once

#include "error.h"

#include "ggml-backend.h"

#include <functional>
#include <string>
#include <vector>

namespace pr {

// "host:port,host:port" -> endpoints; throws PR_ERR_INVALID_ARG on a malformed entry.
std::vector<std::string> parse_endpoints(const char * list);

// The devices of each server, in order. Each server is probed first (a bounded TCP connect and
// ggml-rpc's HELLO), so that a wrong address or a server that is not ggml's is an error here.
std::vector<ggml_backend_dev_t> rpc_add_servers(const std::vector<std::string> & endpoints, int timeout_ms);

// Also registers the devices in ggml's device list, as llama.cpp's --rpc does, so that
// llama.cpp models created in this process use them.
void rpc_register_servers(const std::vector<std::string> & endpoints, int timeout_ms);

// Serves this process's CPU device at endpoint until the process ends (ggml_backend_rpc_start_server).
void rpc_start_server(const char * endpoint, int n_threads, const char * cache_dir);

// Runs f for a call that talks to endpoints: on a worker thread, waiting until it returns, until
// one of the endpoints is found dead (PR_ERR_BACKEND), or until timeout_ms (> 0) passes.
// `broken` is set when the call was abandoned.
void rpc_guarded(const std::vector<std::string> & endpoints, int timeout_ms, bool & broken, const std::function<void()> & f);

// Whether an endpoint failed earlier in this process.
bool rpc_endpoint_dead(const std::string & endpoint);

} // namespace pr
