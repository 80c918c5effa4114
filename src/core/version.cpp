// cudarc::version(): the version this library was built as (the generated header's macros, compiled in).
#include "cudarc/version.hpp"

namespace cudarc {

Version version() noexcept {
    return Version{CUDARC_VERSION_MAJOR, CUDARC_VERSION_MINOR, CUDARC_VERSION_PATCH};
}

}  // namespace cudarc
