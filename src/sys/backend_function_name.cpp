#include "sys/backend_function_name.hpp"

#include "sys/hip/hip_function_names.hpp"

namespace cudarc::sys {

namespace {
bool is_identifier_char(char c) noexcept {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
}  // namespace

std::string backend_function_name(Backend backend, std::string_view call) {
    if (backend != Backend::hip) return std::string(call);
    std::size_t end = 0;
    while (end < call.size() && is_identifier_char(call[end])) ++end;
    const char* hip_name = hip::hip_function_for(call.substr(0, end));
    if (hip_name == nullptr) return std::string(call);
    return std::string(hip_name) + std::string(call.substr(end));
}

}  // namespace cudarc::sys
