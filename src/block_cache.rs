//! The static musl build's allocator: musl's, with a few freed blocks of
//! 1 KiB to 128 KiB kept for reuse.
//!
//! musl's allocator (mallocng) gives memory back to the kernel as soon as
//! a group of blocks is free, so a request that allocates and frees a few
//! kilobytes (a fresh `query-domain`: the XML as read, its JSON string,
//! the reply line) maps and unmaps memory several times, and faults the
//! pages in again every time: a profile showed about five mmap/munmap
//! pairs per fresh `query-domain` in the job thread alone. glibc keeps
//! such memory in its heap. This keeps at most [`SLOTS`] freed blocks per
//! power-of-two size class, so at most ~0.5 MiB: what a request frees, the
//! next one takes back. Smaller blocks, bigger ones and over-aligned ones
//! go to musl unchanged.
//!
//! The slots are atomic pointers: taking one is a `swap` with null (the
//! taker owns the block alone), giving one back a `compare_exchange` from
//! null; no lock, no allocation. Installed as the global allocator only in
//! musl builds (src/main.rs); compiled everywhere so its tests run.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

/// Smallest cached class: 1 KiB (2^10).
const MIN_SHIFT: u32 = 10;
/// Largest cached class: 128 KiB (2^17).
const MAX_SHIFT: u32 = 17;
const CLASSES: usize = (MAX_SHIFT - MIN_SHIFT + 1) as usize;
/// Freed blocks kept per class.
pub const SLOTS: usize = 2;
/// musl's malloc alignment; more than that is left to musl.
const MAX_ALIGN: usize = 16;

pub struct BlockCache {
    slots: [[AtomicPtr<u8>; SLOTS]; CLASSES],
}

impl BlockCache {
    pub const fn new() -> BlockCache {
        BlockCache {
            slots: [const { [const { AtomicPtr::new(ptr::null_mut()) }; SLOTS] }; CLASSES],
        }
    }
}

impl Default for BlockCache {
    fn default() -> BlockCache {
        BlockCache::new()
    }
}

/// The class of a block of `layout`, if it is one the cache keeps.
fn class_of(layout: Layout) -> Option<usize> {
    if layout.align() > MAX_ALIGN || layout.size() <= 1 << (MIN_SHIFT - 1) {
        return None;
    }
    let rounded = layout.size().checked_next_power_of_two()?;
    let shift = rounded.trailing_zeros().max(MIN_SHIFT);
    (shift <= MAX_SHIFT).then(|| (shift - MIN_SHIFT) as usize)
}

/// The layout a block of `class` really has.
fn class_layout(class: usize) -> Layout {
    // 2^17 bytes at most, 16-byte aligned: always a valid layout.
    Layout::from_size_align(1 << (MIN_SHIFT as usize + class), MAX_ALIGN)
        .unwrap_or_else(|_| Layout::new::<u8>())
}

impl BlockCache {
    fn take(&self, class: usize) -> *mut u8 {
        for slot in &self.slots[class] {
            let block = slot.swap(ptr::null_mut(), Ordering::Acquire);
            if !block.is_null() {
                return block;
            }
        }
        ptr::null_mut()
    }

    /// Keeps `block` if a slot of its class is free; false if not.
    fn keep(&self, class: usize, block: *mut u8) -> bool {
        self.slots[class].iter().any(|slot| {
            slot.compare_exchange(ptr::null_mut(), block, Ordering::Release, Ordering::Relaxed)
                .is_ok()
        })
    }
}

// SAFETY: every block handed out is either System's for the same layout
// (uncached sizes) or a block of its class's full layout, from System or
// from a slot that owned it alone; it is given back to a slot or to System
// with that same class layout, so System always frees what it allocated
// with the layout it allocated it with.
unsafe impl GlobalAlloc for BlockCache {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match class_of(layout) {
            Some(class) => {
                let block = self.take(class);
                if block.is_null() {
                    // SAFETY: a class layout has a non-zero size.
                    unsafe { System.alloc(class_layout(class)) }
                } else {
                    block
                }
            }
            // SAFETY: the caller's layout, as GlobalAlloc::alloc requires.
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        match class_of(layout) {
            Some(class) => {
                if !self.keep(class, block) {
                    // SAFETY: the block was allocated with its class layout.
                    unsafe { System.dealloc(block, class_layout(class)) }
                }
            }
            // SAFETY: allocated by System with this layout.
            None => unsafe { System.dealloc(block, layout) },
        }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = class_of(layout);
        let new_layout = match Layout::from_size_align(new_size, layout.align()) {
            Ok(l) => l,
            Err(_) => return ptr::null_mut(),
        };
        let new = class_of(new_layout);
        match (old, new) {
            // The block already has room: its class is its real size.
            (Some(a), Some(b)) if a == b => block,
            // SAFETY: neither size is cached: System's block, its layout.
            (None, None) => unsafe { System.realloc(block, layout, new_size) },
            _ => {
                // SAFETY: as alloc/dealloc above; the copy is within both
                // blocks (the smaller of the two sizes).
                unsafe {
                    let moved = self.alloc(new_layout);
                    if !moved.is_null() {
                        ptr::copy_nonoverlapping(block, moved, layout.size().min(new_size));
                        self.dealloc(block, layout);
                    }
                    moved
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize) -> Layout {
        Layout::from_size_align(size, 8).unwrap()
    }

    #[test]
    fn sizes_map_to_power_of_two_classes_from_1_to_128_kib() {
        assert_eq!(class_of(layout(100)), None);
        assert_eq!(class_of(layout(512)), None);
        assert_eq!(class_of(layout(513)), Some(0));
        assert_eq!(class_of(layout(1024)), Some(0));
        assert_eq!(class_of(layout(1025)), Some(1));
        assert_eq!(class_of(layout(128 << 10)), Some(CLASSES - 1));
        assert_eq!(class_of(layout((128 << 10) + 1)), None);
        assert_eq!(class_of(Layout::from_size_align(4096, 64).unwrap()), None);
        assert_eq!(class_layout(CLASSES - 1).size(), 128 << 10);
    }

    #[test]
    fn a_freed_block_is_handed_out_again_and_only_so_many_are_kept() {
        let cache = BlockCache::new();
        // SAFETY: (test) every block is freed with the layout it was
        // allocated with, and never used after.
        unsafe {
            let a = cache.alloc(layout(3000));
            let b = cache.alloc(layout(3000));
            let c = cache.alloc(layout(3000));
            cache.dealloc(a, layout(3000));
            cache.dealloc(b, layout(3000));
            cache.dealloc(c, layout(3000));
            // Two kept (a and b), c went back to musl.
            let again = [cache.alloc(layout(2500)), cache.alloc(layout(4096))];
            assert!(again.contains(&a) && again.contains(&b));
            for block in again {
                cache.dealloc(block, layout(4096));
            }
        }
    }

    #[test]
    fn realloc_keeps_the_contents_within_and_across_classes() {
        let cache = BlockCache::new();
        // SAFETY: (test) as above; each size written is within the block.
        unsafe {
            let mut block = cache.alloc(layout(700));
            for i in 0..700 {
                *block.add(i) = u8::try_from(i % 251).unwrap();
            }
            let mut size = 700;
            for new_size in [1000, 1024, 5000, 300, 200_000, 900, 64] {
                let grown = cache.realloc(block, layout(size), new_size);
                assert!(!grown.is_null());
                for i in 0..size.min(new_size).min(64) {
                    assert_eq!(
                        *grown.add(i),
                        u8::try_from(i % 251).unwrap(),
                        "after {size} -> {new_size}"
                    );
                }
                block = grown;
                size = new_size;
            }
            let same = cache.realloc(block, layout(size), 60);
            cache.dealloc(same, layout(60));
        }
    }

    #[test]
    fn threads_taking_and_giving_back_blocks_never_share_one() {
        static CACHE: BlockCache = BlockCache::new();
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                std::thread::spawn(move || {
                    for round in 0..2000usize {
                        let size = 1024 << (round % 5);
                        // SAFETY: (test) freed with its layout, used only
                        // between alloc and dealloc by this thread.
                        unsafe {
                            let block = CACHE.alloc(layout(size));
                            assert!(!block.is_null());
                            ptr::write_bytes(block, t, size);
                            std::thread::yield_now();
                            for i in [0, size / 2, size - 1] {
                                assert_eq!(*block.add(i), t, "a block was shared");
                            }
                            CACHE.dealloc(block, layout(size));
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
