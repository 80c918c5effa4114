// TEMPORARY until the HIP backend lands (issue 6): the HIP loaders report that HIP is not built.
#include "sys/backends.hpp"

namespace cudarc::sys {

bool load_hip_driver(DriverApi&, std::string& why) {
    why = "the HIP backend is not built yet";
    return false;
}

bool load_hiprtc(RtcApi&, std::string& why) {
    why = "the HIP backend is not built yet";
    return false;
}

}  // namespace cudarc::sys
