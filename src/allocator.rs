//! The broker's allocator: mimalloc, except that allocations of [`MAPPED_FROM`] bytes or
//! more are mapped straight from the kernel and unmapped when freed.
//!
//! mimalloc keeps freed pages for reuse where glibc's malloc returned a fetch's
//! megabyte-sized buffers to the kernel and faulted them in again on the next read.
//!
//! Why the largest go around it: kafka-protocol 0.18.0's decoders reserved an array's
//! capacity from the count on the wire before reading a single element (docs/FUZZING.md,
//! finding 1; the vendored copy in vendor/kafka-protocol bounds it now), so a request of 20
//! bytes could ask for gigabytes. Under Linux's default overcommit an untouched
//! reservation costs nothing, and the decoder frees it at its next error. But mimalloc leaves
//! some memory resident for each such reservation it serves, after it is freed: 100,000
//! ListGroups requests claiming 20 million to 2 billion states each grew a broker by 107 MB,
//! and the fuzzer of followers' Fetch answers reached its 2 GiB limit that way (finding 9).
//! Mapped here, an untouched reservation is never resident and leaves nothing once freed.
//! Legitimate buffers that large (a 100 MiB produce frame) take the same path, as they would
//! in mimalloc, which maps its largest blocks from the kernel too.
//!
//! RocksDB allocates with glibc's `malloc`, not this allocator; [`keep_c_heap`] tunes it.
//!
//! `unsafe_code` is allowed in this module only: `GlobalAlloc` is an unsafe trait, and
//! mapping memory and `mallopt` are unsafe. What it buys, measured: the 107 MB above is now nothing
//! (`tests/bad_input.rs::requests_claiming_gigabyte_arrays_leave_no_memory_behind`).
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use mimalloc::MiMalloc;
use rustix::mm::{MapFlags, MremapFlags, ProtFlags};

/// Allocations from this size up are mapped from the kernel.
pub const MAPPED_FROM: usize = 64 << 20;

/// Alignment the kernel's mappings always have (a page).
const PAGE: usize = 4096;

pub struct Allocator;

fn mapped(layout: &Layout) -> bool {
    layout.size() >= MAPPED_FROM && layout.align() <= PAGE
}

// SAFETY: every block is freed by the allocator that made it: whether a block was mapped
// depends only on its layout, which the caller passes back unchanged (with `new_size` for
// realloc), and realloc moves a block between the two only through alloc/copy/dealloc.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !mapped(&layout) {
            return MiMalloc.alloc(layout);
        }
        // NORESERVE: like any reservation under overcommit, committed page by page as it
        // is touched.
        match rustix::mm::mmap_anonymous(
            std::ptr::null_mut(),
            layout.size(),
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE | MapFlags::NORESERVE,
        ) {
            Ok(p) => p.cast(),
            Err(_) => std::ptr::null_mut(),
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if mapped(&layout) {
            // Anonymous mappings start zeroed.
            self.alloc(layout)
        } else {
            MiMalloc.alloc_zeroed(layout)
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if mapped(&layout) {
            // Cannot fail for a whole mapping this allocator made.
            let _ = rustix::mm::munmap(ptr.cast::<c_void>(), layout.size());
        } else {
            MiMalloc.dealloc(ptr, layout)
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = Layout::from_size_align_unchecked(new_size, layout.align());
        match (mapped(&layout), mapped(&new)) {
            (false, false) => MiMalloc.realloc(ptr, layout, new_size),
            // The kernel moves the pages, without copying them.
            (true, true) => match rustix::mm::mremap(
                ptr.cast::<c_void>(),
                layout.size(),
                new_size,
                MremapFlags::MAYMOVE,
            ) {
                Ok(p) => p.cast(),
                Err(_) => std::ptr::null_mut(),
            },
            _ => {
                let moved = self.alloc(new);
                if !moved.is_null() {
                    std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                    self.dealloc(ptr, layout);
                }
                moved
            }
        }
    }
}

/// What glibc's `malloc` (RocksDB's allocator) keeps of what is freed: blocks up to 32 MiB
/// come from its heaps rather than fresh mappings, and up to 256 MiB of free heap stays
/// for reuse rather than going back to the kernel.
///
/// Why: each batch a fetch reads is a buffer RocksDB allocates, of up to a megabyte, kept
/// until the response is written. With glibc's defaults those came from new mappings or
/// were trimmed off the heap when freed, and every read faulted fresh pages in and zeroed
/// them: a third of a consumer's read cost in `perf` (docs/BENCHMARKS.md).
pub fn keep_c_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::ffi::c_int;
        extern "C" {
            fn mallopt(param: c_int, value: c_int) -> c_int;
        }
        // <malloc.h>
        const M_TRIM_THRESHOLD: c_int = -1;
        const M_MMAP_THRESHOLD: c_int = -3;
        // SAFETY: mallopt only sets allocator parameters; both values are in range (the
        // mapping threshold's maximum on 64-bit is 32 MiB).
        unsafe {
            mallopt(M_MMAP_THRESHOLD, 32 << 20);
            mallopt(M_TRIM_THRESHOLD, 256 << 20);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks on both sides of the threshold keep their bytes through every kind of move.
    #[test]
    fn blocks_keep_their_bytes_across_the_threshold() {
        let a = Allocator;
        let sizes = [
            64,
            MAPPED_FROM - 1,
            MAPPED_FROM,
            MAPPED_FROM + 5 * PAGE + 3,
            3 * MAPPED_FROM,
            1000,
        ];
        unsafe {
            let mut layout = Layout::from_size_align(sizes[0], 8).unwrap();
            let mut p = a.alloc_zeroed(layout);
            assert!(!p.is_null());
            assert_eq!(*p, 0);
            *p = 7;
            *p.add(sizes[0] - 1) = 9;
            for &size in &sizes[1..] {
                let kept = layout.size().min(size);
                p = a.realloc(p, layout, size);
                assert!(!p.is_null(), "realloc to {size}");
                assert_eq!(*p, 7, "first byte after realloc to {size}");
                if kept == layout.size() {
                    assert_eq!(*p.add(kept - 1), 9, "last byte after realloc to {size}");
                }
                layout = Layout::from_size_align(size, 8).unwrap();
                *p.add(size - 1) = 9;
            }
            a.dealloc(p, layout);

            let big = Layout::from_size_align(2 * MAPPED_FROM, 64).unwrap();
            let z = a.alloc_zeroed(big);
            assert!(!z.is_null());
            assert_eq!(*z.add(big.size() - 1), 0);
            a.dealloc(z, big);
        }
    }

    /// Alignments past a page stay with mimalloc, which honours them.
    #[test]
    fn alignments_past_a_page_are_honoured() {
        let a = Allocator;
        let layout = Layout::from_size_align(MAPPED_FROM, 2 * PAGE).unwrap();
        unsafe {
            let p = a.alloc(layout);
            assert!(!p.is_null());
            assert_eq!(p as usize % (2 * PAGE), 0);
            a.dealloc(p, layout);
        }
    }
}
