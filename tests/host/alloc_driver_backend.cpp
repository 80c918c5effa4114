// The allocator's real backend, driven through a fake driver table: result codes become nullopt,
// false or cudarc::Error as the seam promises, the hooks are called, the context is made current.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "alloc/caching_allocator.hpp"
#include "alloc/driver_backend.hpp"
#include "sys/driver_api.hpp"

namespace {

using cudarc::alloc::DriverBackend;
using cudarc::alloc::DriverBackendHooks;
using cudarc::alloc::EventHandle;
using cudarc::alloc::StreamKey;
namespace sys = cudarc::sys;

// What the fake driver answers next, and what it saw.
struct FakeDriver {
    sys::Result alloc_result = sys::kSuccess;
    sys::Result query_result = sys::kSuccess;
    sys::Result sync_result = sys::kSuccess;
    int capture_status = sys::kStreamCaptureStatusNone;
    cudarc::DevicePtr next_ptr = 0x100000;
    std::vector<cudarc::DevicePtr> freed;
    std::vector<std::size_t> allocated;
    sys::Context current = nullptr;
    std::vector<sys::Context> contexts_during_calls;
    sys::Stream last_capture_query = nullptr;
    int queries = 0;
    int syncs = 0;
};
FakeDriver* fake = nullptr;  // the test case's instance

sys::Result fake_mem_alloc(cudarc::DevicePtr* ptr, std::size_t bytes) {
    fake->contexts_during_calls.push_back(fake->current);
    if (fake->alloc_result != sys::kSuccess) return fake->alloc_result;
    *ptr = fake->next_ptr;
    fake->next_ptr += bytes;
    fake->allocated.push_back(bytes);
    return sys::kSuccess;
}
sys::Result fake_mem_free(cudarc::DevicePtr ptr) {
    fake->contexts_during_calls.push_back(fake->current);
    fake->freed.push_back(ptr);
    return sys::kSuccess;
}
sys::Result fake_event_query(sys::Event) {
    ++fake->queries;
    return fake->query_result;
}
sys::Result fake_event_synchronize(sys::Event) {
    ++fake->syncs;
    return fake->sync_result;
}
sys::Result fake_stream_is_capturing(sys::Stream stream, int* status) {
    fake->last_capture_query = stream;
    *status = fake->capture_status;
    return sys::kSuccess;
}
sys::Result fake_mem_get_info(std::size_t* free_bytes, std::size_t* total) {
    fake->contexts_during_calls.push_back(fake->current);
    *free_bytes = 3000;
    *total = 8000;
    return sys::kSuccess;
}
sys::Result fake_ctx_get_current(sys::Context* ctx) {
    *ctx = fake->current;
    return sys::kSuccess;
}
sys::Result fake_ctx_set_current(sys::Context ctx) {
    fake->current = ctx;
    return sys::kSuccess;
}
sys::Result fake_get_error_name(sys::Result result, const char** name) {
    *name = result == sys::kErrorOutOfMemory ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR_FAKE";
    return sys::kSuccess;
}

sys::DriverApi fake_table() {
    sys::DriverApi api;
    api.mem_alloc = fake_mem_alloc;
    api.mem_free = fake_mem_free;
    api.event_query = fake_event_query;
    api.event_synchronize = fake_event_synchronize;
    api.stream_is_capturing = fake_stream_is_capturing;
    api.mem_get_info = fake_mem_get_info;
    api.ctx_get_current = fake_ctx_get_current;
    api.ctx_set_current = fake_ctx_set_current;
    api.get_error_name = fake_get_error_name;
    return api;
}

// The device's side: an event pool and counters.
struct FakeOwner {
    std::vector<StreamKey> recorded_on;
    std::vector<EventHandle> released;
    int host_blocking = 0;
    int driver_allocations = 0;
    int driver_frees = 0;
};
EventHandle owner_record(void* owner, StreamKey stream) {
    static_cast<FakeOwner*>(owner)->recorded_on.push_back(stream);
    return reinterpret_cast<EventHandle>(std::uintptr_t{0xe0} + stream);
}
void owner_release(void* owner, EventHandle event) noexcept {
    static_cast<FakeOwner*>(owner)->released.push_back(event);
}
void owner_count(void* owner, DriverBackendHooks::Call call) noexcept {
    auto* o = static_cast<FakeOwner*>(owner);
    switch (call) {
        case DriverBackendHooks::Call::host_blocking_wait:
            ++o->host_blocking;
            break;
        case DriverBackendHooks::Call::driver_allocation:
            ++o->driver_allocations;
            break;
        case DriverBackendHooks::Call::driver_free:
            ++o->driver_frees;
            break;
    }
}

DriverBackendHooks hooks_for(FakeOwner& owner) {
    DriverBackendHooks hooks;
    hooks.owner = &owner;
    hooks.record_event = owner_record;
    hooks.release_event = owner_release;
    hooks.count = owner_count;
    return hooks;
}

sys::Context context_value(std::uintptr_t v) {
    return reinterpret_cast<sys::Context>(v);
}

}  // namespace

TEST_CASE("alloc.driver_backend_results") {
    FakeDriver driver;
    fake = &driver;
    const sys::DriverApi api = fake_table();
    FakeOwner owner;
    DriverBackend backend(api, 3, nullptr, hooks_for(owner));

    const auto ptr = backend.allocate_segment(2 << 20);
    REQUIRE(ptr.has_value());
    CHECK(*ptr == 0x100000);
    CHECK(owner.driver_allocations == 1);

    // Out of memory is an answer, not an error: the allocator escalates on it.
    driver.alloc_result = sys::kErrorOutOfMemory;
    CHECK_FALSE(backend.allocate_segment(2 << 20).has_value());
    CHECK(owner.driver_allocations == 1);
    // Any other failure is an error naming the call and the device.
    driver.alloc_result = sys::kErrorInvalidValue;
    try {
        (void)backend.allocate_segment(2 << 20);
        FAIL("expected cudarc::Error");
    } catch (const cudarc::Error& e) {
        CHECK(e.api() == "cuMemAlloc");
        CHECK(e.result() == sys::kErrorInvalidValue);
        CHECK(e.device() == 3);
    }

    backend.free_segment(*ptr, 2 << 20);
    CHECK(driver.freed == std::vector<cudarc::DevicePtr>{*ptr});
    CHECK(owner.driver_frees == 1);

    const EventHandle event = backend.record_event(7);
    CHECK(owner.recorded_on == std::vector<StreamKey>{7});
    driver.query_result = sys::kErrorNotReady;
    CHECK_FALSE(backend.event_completed(event));
    driver.query_result = sys::kSuccess;
    CHECK(backend.event_completed(event));
    driver.query_result = sys::kErrorInvalidValue;
    CHECK_THROWS_AS((void)backend.event_completed(event), cudarc::Error);
    CHECK(owner.host_blocking == 0);  // queries never block

    backend.synchronize_event(event);
    CHECK(driver.syncs == 1);
    CHECK(owner.host_blocking == 1);
    driver.sync_result = sys::kErrorInvalidValue;
    CHECK_THROWS_AS(backend.synchronize_event(event), cudarc::Error);

    backend.release_event(event);
    CHECK(owner.released == std::vector<EventHandle>{event});

    CHECK_FALSE(backend.stream_capturing(42));
    CHECK(driver.last_capture_query == reinterpret_cast<sys::Stream>(std::uintptr_t{42}));
    driver.capture_status = sys::kStreamCaptureStatusActive;
    CHECK(backend.stream_capturing(42));
    driver.capture_status = 2;  // invalidated: still capturing until ended
    CHECK(backend.stream_capturing(42));

    CHECK(backend.memory_info() == std::pair<std::size_t, std::size_t>{3000, 8000});
    CHECK(backend.device_ordinal() == 3);

    // Without the capture query in the table, nothing can be capturing.
    sys::DriverApi no_capture = fake_table();
    no_capture.stream_is_capturing = nullptr;
    DriverBackend plain(no_capture, 0, nullptr, hooks_for(owner));
    CHECK_FALSE(plain.stream_capturing(42));
    fake = nullptr;
}

TEST_CASE("alloc.driver_backend_context") {
    FakeDriver driver;
    fake = &driver;
    const sys::DriverApi api = fake_table();
    FakeOwner owner;
    const sys::Context mine = context_value(0x1000);
    const sys::Context other = context_value(0x2000);
    DriverBackend backend(api, 0, mine, hooks_for(owner));

    // Another context is current: the device's is made current for the call, then put back.
    driver.current = other;
    const auto ptr = backend.allocate_segment(4096);
    REQUIRE(ptr.has_value());
    backend.free_segment(*ptr, 4096);
    (void)backend.memory_info();
    CHECK(driver.contexts_during_calls == std::vector<sys::Context>{mine, mine, mine});
    CHECK(driver.current == other);

    // Already current: left alone.
    driver.current = mine;
    (void)backend.allocate_segment(4096);
    CHECK(driver.current == mine);
    fake = nullptr;
}

TEST_CASE("alloc.driver_backend_needs_hooks") {
    FakeDriver driver;
    fake = &driver;
    const sys::DriverApi api = fake_table();
    FakeOwner owner;
    DriverBackendHooks missing = hooks_for(owner);
    missing.release_event = nullptr;
    CHECK_THROWS_AS(DriverBackend(api, 0, nullptr, missing), cudarc::Error);
    missing = hooks_for(owner);
    missing.record_event = nullptr;
    CHECK_THROWS_AS(DriverBackend(api, 0, nullptr, missing), cudarc::Error);
    missing = hooks_for(owner);
    missing.count = nullptr;  // optional
    CHECK_NOTHROW(DriverBackend(api, 0, nullptr, missing));
    fake = nullptr;
}

TEST_CASE("alloc.driver_backend_under_the_allocator") {
    // The whole path through the real backend: an allocation, a cross-stream free, an OOM that waits.
    FakeDriver driver;
    fake = &driver;
    const sys::DriverApi api = fake_table();
    FakeOwner owner;
    {
        cudarc::alloc::CachingAllocator allocator(
            std::make_unique<DriverBackend>(api, 0, nullptr, hooks_for(owner)));
        const auto a = allocator.allocate(1000, 1);
        CHECK(driver.allocated == std::vector<std::size_t>{2 << 20});
        allocator.record_stream(a, 2);
        allocator.free(a);
        CHECK(owner.recorded_on == std::vector<StreamKey>{2});
        driver.query_result = sys::kErrorNotReady;
        const auto b = allocator.allocate(1000, 1);
        CHECK(b.ptr != a.ptr);
        CHECK(driver.queries == 1);
        driver.query_result = sys::kSuccess;
        const auto c = allocator.allocate(1000, 1);
        CHECK(c.ptr == a.ptr);
        CHECK(owner.released.size() == 1);
        allocator.free(b);
        allocator.free(c);
    }
    CHECK(driver.freed.size() == 1);  // the segment went back at destruction
    CHECK(owner.driver_frees == 1);
    fake = nullptr;
}
