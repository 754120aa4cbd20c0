// Errors inside the native code are C++ exceptions carrying a pr_status; api.cpp turns them into
// return codes and pr_last_error() text at the C boundary. Nothing may reach a GGML_ASSERT.
#pragma once

#include "pyriver.h"

#include <cstdarg>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace pr {

struct error : std::runtime_error {
    pr_status status;
    error(pr_status s, const std::string & msg) : std::runtime_error(msg), status(s) {}
};

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
[[noreturn]] inline void fail(pr_status s, const char * fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    throw error(s, buf);
}

} // namespace pr
