//! The static musl build's allocator: musl's, with freed blocks kept for
//! reuse.
//!
//! musl's allocator (mallocng) gives memory back to the kernel as soon as
//! a group of blocks is free, so a request that allocates and frees many
//! blocks (a fresh `query-domain`: the XML as read, its element tree, the
//! JSON of the domain, the reply line) maps and unmaps memory several
//! times, and faults the pages in again every time, each unmap also
//! interrupting the process's other CPUs to flush their TLBs. glibc keeps
//! such memory in its heap. So this allocator keeps what is freed:
//!
//! - Blocks of up to [`SMALL_MAX`] bytes (most of a parse's allocations)
//!   come from size classes 16 bytes apart, carved from 32 KiB slabs; a
//!   freed block goes on its class's free list and is never given back.
//!   The slabs are cut from one region of [`SMALL_REGION`] bytes that musl
//!   maps at the first small allocation (a page costs memory only once
//!   touched). Once the region is used up, small blocks that the free
//!   lists cannot serve come from musl like big ones, and go back to it
//!   when freed: however large one request's parse was (a request line may
//!   be MiBs of JSON), small blocks hold at most the region for good.
//!   Each class has a spin lock held for a few instructions (a pop or a
//!   push, or a carve); nothing allocates or blocks while it is held.
//! - Blocks over 1 KiB up to 128 KiB (power-of-two classes): at most [`SLOTS`]
//!   freed blocks per class, so at most ~1 MiB; what a request frees,
//!   the next one takes back. The slots are atomic pointers: taking one is
//!   a `swap` with null (the taker owns the block alone), giving one back
//!   a `compare_exchange` from null.
//! - Bigger blocks and over-aligned ones go to musl unchanged.
//!
//! Installed as the global allocator only in musl builds (src/main.rs);
//! compiled everywhere so its tests run.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

/// Smallest power-of-two class: 2 KiB (2^11), for blocks over 1 KiB.
const MIN_SHIFT: u32 = 11;
/// Largest cached class: 128 KiB (2^17).
const MAX_SHIFT: u32 = 17;
const CLASSES: usize = (MAX_SHIFT - MIN_SHIFT + 1) as usize;
/// Freed blocks kept per class.
pub const SLOTS: usize = 4;
/// musl's malloc alignment; more than that is left to musl.
const MAX_ALIGN: usize = 16;

/// The largest small block.
pub const SMALL_MAX: usize = 1024;
/// Small classes are this many bytes apart (and blocks so aligned).
const GRAIN: usize = 16;
const SMALL_CLASSES: usize = SMALL_MAX / GRAIN;
/// What a small class cuts from the region when its free list is empty.
const SLAB: usize = 32 * 1024;
/// The most memory small blocks keep for good: 4 MiB. 500 fresh
/// `query-domain`s on the test driver touch 320 KiB of it; the whole static
/// launcher is 3.5 MiB with the test guest after 10 minutes of agent polls.
pub const SMALL_REGION: usize = 4 << 20;

/// Where the small classes' slabs come from: a range of memory taken from
/// musl once, cut front to back, never given back.
struct Region {
    /// Its first byte; null until the first small allocation (or if musl
    /// had no memory for it then).
    start: AtomicPtr<u8>,
    /// Bytes already cut off.
    used: AtomicUsize,
    bytes: usize,
}

impl Region {
    const fn new(bytes: usize) -> Region {
        Region {
            start: AtomicPtr::new(ptr::null_mut()),
            used: AtomicUsize::new(0),
            bytes,
        }
    }

    fn layout(&self) -> Layout {
        Layout::from_size_align(self.bytes, GRAIN).unwrap_or_else(|_| Layout::new::<u8>())
    }

    /// The region's start, taken from musl by the first caller.
    fn start(&self) -> *mut u8 {
        let start = self.start.load(Ordering::Acquire);
        if !start.is_null() {
            return start;
        }
        // SAFETY: a non-zero size (SMALL_REGION, or a test's).
        let mapped = unsafe { System.alloc(self.layout()) };
        if mapped.is_null() {
            return mapped;
        }
        match self.start.compare_exchange(
            ptr::null_mut(),
            mapped,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => mapped,
            Err(winner) => {
                // Another thread mapped it first; this one is not needed.
                // SAFETY: allocated just above with this layout, unused.
                unsafe { System.dealloc(mapped, self.layout()) };
                winner
            }
        }
    }

    /// The next slab, or null once the region is used up.
    fn slab(&self) -> *mut u8 {
        let start = self.start();
        if start.is_null() {
            return start;
        }
        match self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                (used + SLAB <= self.bytes).then_some(used + SLAB)
            }) {
            // SAFETY: `used + SLAB <= bytes`: within the region.
            Ok(used) => unsafe { start.add(used) },
            Err(_) => ptr::null_mut(),
        }
    }

    /// Whether `block` was cut from this region.
    fn holds(&self, block: *mut u8) -> bool {
        let start = self.start.load(Ordering::Acquire) as usize;
        start != 0 && (start..start + self.bytes).contains(&(block as usize))
    }
}

/// One small size class: a free list threaded through the freed blocks
/// (each one's first word points to the next) and the unused rest of the
/// last slab.
struct SmallClass {
    locked: AtomicBool,
    /// Guarded by `locked`.
    free: UnsafeCell<*mut u8>,
    /// Guarded by `locked`: the slab's next uncarved byte and its end.
    next: UnsafeCell<*mut u8>,
    end: UnsafeCell<*mut u8>,
}

// SAFETY: the cells are read and written only by the thread that holds
// `locked` (acquired with Acquire, released with Release).
unsafe impl Sync for SmallClass {}

impl SmallClass {
    const fn new() -> SmallClass {
        SmallClass {
            locked: AtomicBool::new(false),
            free: UnsafeCell::new(ptr::null_mut()),
            next: UnsafeCell::new(ptr::null_mut()),
            end: UnsafeCell::new(ptr::null_mut()),
        }
    }

    fn lock(&self) {
        let mut spins = 0u32;
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            while self.locked.load(Ordering::Relaxed) {
                // The holder is a few instructions from letting go, unless
                // it was preempted: then give it the CPU.
                if spins < 100 {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }

    fn unlock(&self) {
        self.locked.store(false, Ordering::Release);
    }

    /// A block of `size` bytes (the class's size): a freed one, or carved;
    /// null once the region is used up.
    fn take(&self, size: usize, region: &Region) -> *mut u8 {
        self.lock();
        // SAFETY: the lock is held. A block on the free list is one of this
        // class that nobody uses, its first word written by `give`.
        let block = unsafe {
            let head = *self.free.get();
            if head.is_null() {
                self.carve(size, region)
            } else {
                *self.free.get() = head.cast::<*mut u8>().read();
                head
            }
        };
        self.unlock();
        block
    }

    /// Cuts `size` bytes off the slab, taking a new slab if needed.
    ///
    /// # Safety
    /// The caller holds the lock.
    unsafe fn carve(&self, size: usize, region: &Region) -> *mut u8 {
        // SAFETY: the lock is held; `next..end` is the unused part of a
        // live slab of this class (or both are null).
        unsafe {
            let next = *self.next.get();
            let room = (*self.end.get() as usize).saturating_sub(next as usize);
            let block = if next.is_null() || room < size {
                // The slab's rest (less than a block) stays unused.
                let slab = region.slab();
                if slab.is_null() {
                    return slab;
                }
                *self.end.get() = slab.add(SLAB);
                slab
            } else {
                next
            };
            *self.next.get() = block.add(size);
            block
        }
    }

    /// Puts a block of this class on the free list.
    ///
    /// # Safety
    /// `block` came from `take` of this class and is no longer used.
    unsafe fn give(&self, block: *mut u8) {
        self.lock();
        // SAFETY: the lock is held; the block is at least GRAIN bytes,
        // GRAIN-aligned and nobody else's: room for the link.
        unsafe {
            block.cast::<*mut u8>().write(*self.free.get());
            *self.free.get() = block;
        }
        self.unlock();
    }
}

pub struct BlockCache {
    small: [SmallClass; SMALL_CLASSES],
    region: Region,
    slots: [[AtomicPtr<u8>; SLOTS]; CLASSES],
}

impl BlockCache {
    pub const fn new() -> BlockCache {
        BlockCache::with_region(SMALL_REGION)
    }

    /// A cache whose small blocks keep at most `bytes` (tests use less).
    const fn with_region(bytes: usize) -> BlockCache {
        BlockCache {
            small: [const { SmallClass::new() }; SMALL_CLASSES],
            region: Region::new(bytes),
            slots: [const { [const { AtomicPtr::new(ptr::null_mut()) }; SLOTS] }; CLASSES],
        }
    }
}

impl Drop for BlockCache {
    /// Only a test's cache is dropped (the global one lives as long as the
    /// process); its blocks are all freed by then.
    fn drop(&mut self) {
        let start = *self.region.start.get_mut();
        if !start.is_null() {
            // SAFETY: mapped by `Region::start` with this layout.
            unsafe { System.dealloc(start, self.region.layout()) };
        }
    }
}

/// The real layout of a small class's block.
fn small_layout(class: usize) -> Layout {
    // At most SMALL_MAX bytes, GRAIN-aligned: always a valid layout.
    Layout::from_size_align((class + 1) * GRAIN, GRAIN).unwrap_or_else(|_| Layout::new::<u8>())
}

/// Where a block of some layout comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Small class `n`: blocks of `(n + 1) * GRAIN` bytes.
    Small(usize),
    /// Power-of-two class `n` (see `class_of`).
    Block(usize),
    /// musl, with the caller's layout.
    System,
}

fn kind_of(layout: Layout) -> Kind {
    if layout.align() <= GRAIN && layout.size() <= SMALL_MAX {
        return Kind::Small(layout.size().max(1).div_ceil(GRAIN) - 1);
    }
    class_of(layout).map_or(Kind::System, Kind::Block)
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

// SAFETY: every block handed out is System's for the same layout (uncached
// sizes), a block of its power-of-two class's full layout (from System or
// from a slot that owned it alone), or a small class's block (carved from a
// slab of the region, popped off the class's free list under its lock, or,
// once the region is used up, System's for the class's full layout). Layout
// decides the kind, and for a small block the address whether the region
// holds it, so a block comes back to where it came from: a slot or System
// with its class layout (System frees what it allocated, with the layout it
// allocated it with), or its small class's free list (the region is never
// freed while the cache lives). Small blocks are 16-byte aligned: the
// region and slabs are, and sizes are multiples of 16.
unsafe impl GlobalAlloc for BlockCache {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match kind_of(layout) {
            Kind::Small(class) => {
                let block = self.small[class].take(small_layout(class).size(), &self.region);
                if block.is_null() {
                    // SAFETY: a small class layout has a non-zero size.
                    unsafe { System.alloc(small_layout(class)) }
                } else {
                    block
                }
            }
            Kind::Block(class) => {
                let block = self.take(class);
                if block.is_null() {
                    // SAFETY: a class layout has a non-zero size.
                    unsafe { System.alloc(class_layout(class)) }
                } else {
                    block
                }
            }
            // SAFETY: the caller's layout, as GlobalAlloc::alloc requires.
            Kind::System => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        match kind_of(layout) {
            Kind::Small(class) => {
                if self.region.holds(block) {
                    // SAFETY: a block of this layout cut from the region
                    // came from this small class.
                    unsafe { self.small[class].give(block) }
                } else {
                    // SAFETY: allocated by System with the class layout
                    // when the region was used up.
                    unsafe { System.dealloc(block, small_layout(class)) }
                }
            }
            Kind::Block(class) => {
                if !self.keep(class, block) {
                    // SAFETY: the block was allocated with its class layout.
                    unsafe { System.dealloc(block, class_layout(class)) }
                }
            }
            // SAFETY: allocated by System with this layout.
            Kind::System => unsafe { System.dealloc(block, layout) },
        }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new_layout = match Layout::from_size_align(new_size, layout.align()) {
            Ok(l) => l,
            Err(_) => return ptr::null_mut(),
        };
        match (kind_of(layout), kind_of(new_layout)) {
            // SAFETY: neither size is cached: System's block, its layout.
            (Kind::System, Kind::System) => unsafe { System.realloc(block, layout, new_size) },
            // The block already has room: its class is its real size.
            (old, new) if old == new => block,
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
    fn sizes_map_to_power_of_two_classes_from_2_to_128_kib() {
        assert_eq!(class_of(layout(100)), None);
        assert_eq!(class_of(layout(1024)), None);
        assert_eq!(class_of(layout(1025)), Some(0));
        assert_eq!(class_of(layout(2048)), Some(0));
        assert_eq!(class_of(layout(2049)), Some(1));
        assert_eq!(class_of(layout(128 << 10)), Some(CLASSES - 1));
        assert_eq!(class_of(layout((128 << 10) + 1)), None);
        assert_eq!(class_of(Layout::from_size_align(4096, 64).unwrap()), None);
        assert_eq!(class_layout(CLASSES - 1).size(), 128 << 10);
    }

    #[test]
    fn small_sizes_map_to_classes_16_bytes_apart() {
        assert_eq!(kind_of(layout(1)), Kind::Small(0));
        assert_eq!(kind_of(layout(16)), Kind::Small(0));
        assert_eq!(kind_of(layout(17)), Kind::Small(1));
        assert_eq!(kind_of(layout(1024)), Kind::Small(SMALL_CLASSES - 1));
        assert_eq!(kind_of(layout(1025)), Kind::Block(0));
        assert_eq!(
            kind_of(Layout::from_size_align(64, 32).unwrap()),
            Kind::System
        );
        assert_eq!(kind_of(layout(200_000)), Kind::System);
    }

    #[test]
    fn a_freed_small_block_is_reused_and_slabs_are_carved_in_order() {
        let cache = BlockCache::new();
        // SAFETY: (test) every block is freed with the layout it was
        // allocated with, and never used after.
        unsafe {
            let a = cache.alloc(layout(40));
            let b = cache.alloc(layout(48));
            // Same class (48 bytes): carved one after the other.
            assert_eq!(b as usize - a as usize, 48);
            assert_eq!(a as usize % GRAIN, 0);
            cache.dealloc(a, layout(40));
            assert_eq!(cache.alloc(layout(33)), a, "the freed block is reused");
            // More blocks than a slab holds: a new slab, all distinct.
            let many: Vec<*mut u8> = (0..2 * SLAB / 48)
                .map(|_| cache.alloc(layout(48)))
                .collect();
            let mut sorted = many.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted.len(), many.len());
            for block in many.into_iter().chain([a, b]) {
                cache.dealloc(block, layout(48));
            }
        }
    }

    #[test]
    fn once_the_region_is_used_up_small_blocks_come_from_musl_and_go_back_to_it() {
        // A region of two slabs.
        let cache = BlockCache::with_region(2 * SLAB);
        let per_slab = SLAB / 1024;
        // SAFETY: (test) every block is freed with the layout it was
        // allocated with, and never used after.
        unsafe {
            let blocks: Vec<*mut u8> = (0..3 * per_slab)
                .map(|_| cache.alloc(layout(1024)))
                .collect();
            let (inside, outside): (Vec<*mut u8>, Vec<*mut u8>) =
                blocks.iter().copied().partition(|&b| cache.region.holds(b));
            assert_eq!(inside.len(), 2 * per_slab, "two slabs cut from the region");
            assert_eq!(outside.len(), per_slab, "the rest from musl");
            for &block in &blocks {
                assert!(!block.is_null());
                assert_eq!(block as usize % GRAIN, 0);
                ptr::write_bytes(block, 0xa5, 1024);
            }
            // A small block of another class: the region is used up.
            let other = cache.alloc(layout(24));
            assert!(!cache.region.holds(other));
            cache.dealloc(other, layout(24));
            // Freed: the region's blocks go on the free list and are
            // handed out again before musl is asked; musl's go back.
            for &block in &blocks {
                cache.dealloc(block, layout(1020));
            }
            let again = cache.alloc(layout(1024));
            assert!(cache.region.holds(again));
            let grown = cache.realloc(again, layout(1024), 1010);
            assert_eq!(grown, again, "same class: same block");
            cache.dealloc(grown, layout(1010));
        }
    }

    #[test]
    fn a_freed_block_is_handed_out_again_and_only_so_many_are_kept() {
        let cache = BlockCache::new();
        // SAFETY: (test) every block is freed with the layout it was
        // allocated with, and never used after.
        unsafe {
            let blocks: Vec<*mut u8> = (0..=SLOTS).map(|_| cache.alloc(layout(3000))).collect();
            for &block in &blocks {
                cache.dealloc(block, layout(3000));
            }
            // The first SLOTS kept, the last went back to musl.
            let again: Vec<*mut u8> = (0..SLOTS)
                .map(|i| cache.alloc(layout(if i % 2 == 0 { 2500 } else { 4096 })))
                .collect();
            for kept in &blocks[..SLOTS] {
                assert!(again.contains(kept));
            }
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
                    for round in 0..4000usize {
                        // Small classes and power-of-two ones.
                        let size = match round % 2 {
                            0 => 1 + (round * 7) % SMALL_MAX,
                            _ => 1024 << (round % 5),
                        };
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
