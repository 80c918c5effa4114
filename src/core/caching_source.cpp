#include "core/caching_source.hpp"

#include "alloc/driver_backend.hpp"
#include "core/device_state.hpp"

namespace cudarc::detail {
namespace {

// Note [Stream identity] (core/device_state.hpp): blocks are cached under StreamState::key(), which names
// one queue of work for as long as anything is cached under it; a foreign stream's key is retired, its
// blocks moved to the default stream, when its wrapper is destroyed.
sys::Stream stream_of_key(alloc::StreamKey key) noexcept {
    if ((key & 1u) != 0) return reinterpret_cast<const StreamState*>(key & ~alloc::StreamKey{1})->handle();
    return reinterpret_cast<sys::Stream>(key);
}

class CachingSource final : public CachingResource {
  public:
    CachingSource(DeviceState& device, const AllocatorConfig& config)
        : device_(device), allocator_(make_backend(device), config) {}

    MemoryBlock allocate(std::size_t bytes, StreamState& stream) override {
        // Note: no block, not even a cached one, from a lost device (Note [Lost devices]).
        if (device_.lost()) device_.throw_lost();
        // Note [Capture overlay]: no cuMemAlloc from a capturing thread (it would invalidate the capture).
        try {
            const alloc::Allocation allocation = allocator_.allocate(
                bytes, stream.key(),
                capture_on_this_thread() ? alloc::NewSegments::refused : alloc::NewSegments::allowed);
            return {allocation.ptr, allocation.block};
        } catch (...) {
            device_.rethrow_current();
        }
    }

    void deallocate(const MemoryBlock& block, std::size_t bytes, StreamState& home,
                    std::vector<StreamUse> uses) noexcept override {
        const alloc::Allocation allocation{block.ptr, bytes, static_cast<alloc::Block*>(block.handle)};
        if (uses.empty()) {
            // Note: the hot path: same-stream reuse needs no event and no list. (A retired foreign home's
            // blocks were moved to the default stream, which waited for its final event.)
            try {
                allocator_.free(allocation);
            } catch (...) {
                defer_current();
                free_after_host_wait(allocation);
            }
            return;
        }
        std::vector<alloc::PendingUse> pending;
        bool freed = false;
        try {
            pending.reserve(uses.size() + 1);
            for (StreamUse& use : uses) {
                if (use.stream.get() == &home)
                    continue;  // same stream: reuse is ordered by the stream itself
                if (use.event == nullptr) use.event = use.stream->mark();
                pending.push_back({use.stream->event_key(), std::exchange(use.event, nullptr)});
            }
            allocator_.free(allocation, pending);
            pending.clear();  // ownership of the events passed to the allocator
            freed = true;
        } catch (...) {
            defer_current();
        }
        for (const auto& use : pending) device_.events().release(use.event);
        for (StreamUse& use : uses) device_.events().release(use.event);
        if (!freed) free_after_host_wait(allocation);
    }

    void empty_cache() override { allocator_.empty_cache(); }

    void retire_stream(StreamState& stream) noexcept override {
        // The default stream takes the retired stream's blocks over, after waiting for its final work.
        StreamState& heir = *device_.default_stream_state();
        try {
            stream.order_before(heir.handle());
        } catch (const Error& error) {
            device_.defer(error);
            device_.synchronize_noexcept();
        } catch (...) {
            device_.synchronize_noexcept();
        }
        allocator_.retire_stream(stream.key(), heir.key());
    }
    AllocatorStats stats() const override { return allocator_.stats(); }
    void reset_peak() override { allocator_.reset_peak(); }
    alloc::CachingAllocator& allocator() noexcept override { return allocator_; }

  private:
    // Records the exception being handled for Device::rethrow_deferred_error.
    void defer_current() const noexcept {
        try {
            throw;
        } catch (const Error& error) {
            device_.defer(error);
        } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory while describing the failure
        }
    }

    // Note [Free after a failed record]
    // A block used on other streams goes back to the pool gated by an event per use. When one of those
    // events cannot be recorded (or the allocator cannot take the free), the block is neither freed nor
    // pending, and would leak. Instead, wait on the host for the whole device (cuCtxSynchronize, counted):
    // then every use has completed and the block is free at once. If even that fails the block stays out of
    // reach (a leak, with the error deferred) rather than be reused under work that may still run, unless
    // the device is lost, where nothing runs and nothing is handed out any more.
    void free_after_host_wait(const alloc::Allocation& allocation) noexcept {
        try {
            // Note: a failure to bind is deferred, and the wait tried anyway (the context is usually
            // current).
            const auto scope = device_.bind_or_defer();
            device_.check(device_.api().ctx_synchronize(), sys::Entry::ctx_synchronize);
            AtomicCounters::bump(device_.counters().context_synchronizes);
        } catch (const Error& error) {
            device_.defer(error);
            if (!device_.lost()) return;
        } catch (...) {
            return;
        }
        try {
            allocator_.free_completed(allocation);
        } catch (...) {
            defer_current();
        }
    }

    static std::unique_ptr<alloc::AllocatorBackend> make_backend(DeviceState& device) {
        alloc::DriverBackendHooks hooks;
        hooks.owner = &device;
        hooks.record_event = [](void* owner, alloc::StreamKey stream) -> alloc::EventHandle {
            auto& d = *static_cast<DeviceState*>(owner);
            const auto scope = d.bind();
            return d.record_event(stream_of_key(stream));
        };
        hooks.stream_of = [](void*, alloc::StreamKey stream) noexcept { return stream_of_key(stream); };
        hooks.release_event = [](void* owner, alloc::EventHandle event) noexcept {
            static_cast<DeviceState*>(owner)->events().release(event);
        };
        hooks.defer = [](void* owner, sys::Result result, sys::Entry entry) noexcept {
            static_cast<DeviceState*>(owner)->defer(result, entry);
        };
        hooks.count = [](void* owner, alloc::DriverBackendHooks::Call call) noexcept {
            auto& counters = static_cast<DeviceState*>(owner)->counters();
            switch (call) {
                case alloc::DriverBackendHooks::Call::host_blocking_wait:
                    AtomicCounters::bump(counters.event_synchronizes);
                    break;
                case alloc::DriverBackendHooks::Call::driver_allocation:
                    AtomicCounters::bump(counters.driver_allocations);
                    break;
                case alloc::DriverBackendHooks::Call::driver_free:
                    AtomicCounters::bump(counters.driver_frees);
                    break;
            }
        };
        return std::make_unique<alloc::DriverBackend>(device.api(), device.ordinal(), device.context(),
                                                      hooks);
    }

    DeviceState& device_;
    alloc::CachingAllocator allocator_;
};

}  // namespace

std::unique_ptr<CachingResource> make_caching_source(DeviceState& device, const AllocatorConfig& config) {
    return std::make_unique<CachingSource>(device, config);
}

}  // namespace cudarc::detail
