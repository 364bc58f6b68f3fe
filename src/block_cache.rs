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
/// The most memory small blocks keep for good. It is far more than a busy
/// launcher's requests touch (docs/figures.md), and untouched pages cost
/// nothing.
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
    /// process); its blocks are all freed by then, but the freed blocks it
    /// keeps in its slots are still musl's, and go back to it here (Miri
    /// found them leaked).
    fn drop(&mut self) {
        for (class, slots) in self.slots.iter_mut().enumerate() {
            for slot in slots {
                let block = *slot.get_mut();
                if !block.is_null() {
                    // SAFETY: a kept block was allocated by System with its
                    // class layout, and nobody holds it.
                    unsafe { System.dealloc(block, class_layout(class)) };
                }
            }
        }
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

/// An allocator under load from many threads, every block's bytes checked.
/// The static build runs it on its own global allocator (`virt-launcher
/// __allocator-self-test`, from scripts/test.sh); the unit tests run it on
/// a cache of their own whose region is small enough to run out.
pub mod stress {
    use std::alloc::{GlobalAlloc, Layout};
    use std::sync::atomic::{AtomicBool, Ordering};

    use crossbeam_channel::{Receiver, Sender, unbounded};

    use super::{MAX_SHIFT, SMALL_MAX};

    /// `argv[1]` of the binary's hidden self-test mode (src/main.rs).
    pub const MODE: &str = "__allocator-self-test";

    /// How hard to push.
    #[derive(Clone, Copy, Debug)]
    pub struct Load {
        pub threads: usize,
        /// Operations per thread.
        pub rounds: usize,
        /// Small blocks a thread allocates at once every so often, to use
        /// up the small blocks' region.
        pub burst: usize,
        /// The largest block asked for (blocks past it are cut to it).
        pub largest: usize,
    }

    /// The self-test's load: every class many times over, the region used
    /// up many times over.
    pub const SELF_TEST: Load = Load {
        threads: 8,
        rounds: 20_000,
        burst: 4096,
        largest: usize::MAX,
    };

    /// What a run did.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Done {
        pub allocations: u64,
        pub reallocations: u64,
        /// Blocks freed by another thread than the one that allocated them.
        pub freed_elsewhere: u64,
        pub bytes_checked: u64,
    }

    impl Done {
        fn add(&mut self, other: Done) {
            self.allocations += other.allocations;
            self.reallocations += other.reallocations;
            self.freed_elsewhere += other.freed_elsewhere;
            self.bytes_checked += other.bytes_checked;
        }
    }

    /// A live block and the seed of the bytes written into it.
    struct Block {
        ptr: *mut u8,
        layout: Layout,
        seed: u64,
    }

    // SAFETY: a Block is the only handle on its memory, and a block of a
    // GlobalAlloc may be used and freed on any thread.
    unsafe impl Send for Block {}

    /// xorshift64*: deterministic, so a failure repeats.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        /// Uniform in `0..n` (n > 0; the bias is irrelevant here).
        fn below(&mut self, n: usize) -> usize {
            usize::try_from(self.next() % u64::try_from(n).unwrap_or(u64::MAX)).unwrap_or(0)
        }

        /// A layout of every kind the cache tells apart: each small class
        /// (alignments up to 16), each power-of-two class, bigger blocks,
        /// and over-aligned ones; at most `largest` bytes.
        fn layout(&mut self, largest: usize) -> Layout {
            let (size, align) = match self.below(32) {
                0..=19 => (1 + self.below(SMALL_MAX), 1 << self.below(5)),
                20..=27 => {
                    // Each power-of-two class: over 2^(shift) up to 2^(shift + 1).
                    let shift = 10 + self.below(usize::try_from(MAX_SHIFT).unwrap_or(17) - 10);
                    (
                        (1 << shift) + 1 + self.below(1 << shift),
                        1 << self.below(5),
                    )
                }
                28 | 29 => ((1 << MAX_SHIFT) + 1 + self.below(3 << MAX_SHIFT), 16),
                _ => (1 + self.below(8192), 32 << self.below(8)),
            };
            Layout::from_size_align(size.min(largest.max(1)), align)
                .unwrap_or_else(|_| Layout::new::<u64>())
        }
    }

    /// The 8 bytes at `word` of a block written with `seed`.
    fn pattern(seed: u64, word: usize) -> [u8; 8] {
        let mut z = seed
            ^ u64::try_from(word)
                .unwrap_or(0)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)).to_le_bytes()
    }

    /// Writes `seed`'s bytes into `bytes`.
    fn fill(bytes: &mut [u8], seed: u64) {
        for (word, chunk) in bytes.chunks_mut(8).enumerate() {
            let len = chunk.len();
            chunk.copy_from_slice(&pattern(seed, word)[..len]);
        }
    }

    /// The first byte of `bytes` that is not `seed`'s.
    fn first_changed(bytes: &[u8], seed: u64) -> Option<usize> {
        bytes.chunks(8).enumerate().find_map(|(word, chunk)| {
            let want = &pattern(seed, word)[..chunk.len()];
            let at = chunk.iter().zip(want).position(|(got, want)| got != want)?;
            Some(word * 8 + at)
        })
    }

    /// One thread's side: the allocator, its counts, and where blocks go
    /// to be freed by the next thread.
    struct Worker<'a, A: GlobalAlloc> {
        allocator: &'a A,
        rng: Rng,
        serial: u64,
        largest: usize,
        done: Done,
        /// Where blocks go to be freed by the next thread; `None` once this
        /// thread is done with its rounds.
        next: Option<Sender<Block>>,
    }

    impl<A: GlobalAlloc> Worker<'_, A> {
        fn alloc(&mut self, layout: Layout) -> Result<Block, String> {
            // SAFETY: every layout made above has a non-zero size.
            let ptr = unsafe { self.allocator.alloc(layout) };
            if ptr.is_null() {
                return Err(format!("allocating {layout:?} failed"));
            }
            if ptr.align_offset(layout.align()) != 0 {
                return Err(format!("{ptr:p} for {layout:?} is not aligned"));
            }
            self.done.allocations += 1;
            self.serial += 1;
            let seed = self.rng.next() ^ self.serial;
            // SAFETY: `layout.size()` bytes at `ptr` are this block's alone.
            fill(
                unsafe { std::slice::from_raw_parts_mut(ptr, layout.size()) },
                seed,
            );
            Ok(Block { ptr, layout, seed })
        }

        /// Checks that `block` still holds what was written into it.
        fn check(&mut self, block: &Block, what: &str) -> Result<(), String> {
            self.check_first(block, block.layout.size(), what)
        }

        /// Checks the first `len` bytes of `block` (its size at most).
        fn check_first(&mut self, block: &Block, len: usize, what: &str) -> Result<(), String> {
            // SAFETY: the block is live and at least `len` bytes long.
            let bytes = unsafe { std::slice::from_raw_parts(block.ptr, len) };
            self.done.bytes_checked += u64::try_from(len).unwrap_or(0);
            match first_changed(bytes, block.seed) {
                None => Ok(()),
                Some(at) => Err(format!(
                    "{what}: byte {at} of the block {:p} ({:?}) changed: another holder wrote it",
                    block.ptr, block.layout
                )),
            }
        }

        fn free(&mut self, block: Block, what: &str) -> Result<(), String> {
            self.check(&block, what)?;
            // SAFETY: allocated by this allocator with this layout, freed
            // once: the Block is consumed.
            unsafe { self.allocator.dealloc(block.ptr, block.layout) };
            Ok(())
        }

        /// Reallocates `block` through a chain of sizes that cross the
        /// classes, checking what each move must keep.
        fn realloc_chain(&mut self, mut block: Block) -> Result<Block, String> {
            for _ in 0..1 + self.rng.below(6) {
                let size = self.rng.layout(self.largest).size();
                let Ok(layout) = Layout::from_size_align(size, block.layout.align()) else {
                    continue;
                };
                // SAFETY: a live block of this allocator with its layout, and
                // a non-zero new size that makes a valid layout.
                let ptr = unsafe { self.allocator.realloc(block.ptr, block.layout, size) };
                if ptr.is_null() {
                    return Err(format!("realloc of {:?} to {size} failed", block.layout));
                }
                self.done.reallocations += 1;
                let kept = block.layout.size().min(size);
                block = Block {
                    ptr,
                    layout,
                    seed: block.seed,
                };
                self.check_first(&block, kept, "what realloc kept")?;
                if ptr.align_offset(layout.align()) != 0 {
                    return Err(format!("realloc gave {ptr:p} for {layout:?}, not aligned"));
                }
                self.serial += 1;
                let seed = self.rng.next() ^ self.serial;
                // SAFETY: `size` bytes at `ptr` are this block's alone.
                fill(unsafe { std::slice::from_raw_parts_mut(ptr, size) }, seed);
                block.seed = seed;
            }
            Ok(block)
        }

        /// Hands `block` to the next thread, which frees it (or frees it
        /// here if that thread is gone).
        fn pass_on(&mut self, block: Block) -> Result<(), String> {
            self.check(&block, "before passing on")?;
            let Some(next) = &self.next else {
                return self.free(block, "not passed on");
            };
            match next.send(block) {
                Ok(()) => Ok(()),
                Err(returned) => self.free(returned.into_inner(), "not passed on"),
            }
        }

        fn run(
            &mut self,
            rounds: usize,
            burst: usize,
            from_previous: &Receiver<Block>,
            failed: &AtomicBool,
        ) -> Result<(), String> {
            let mut live: Vec<Block> = Vec::new();
            for round in 0..rounds {
                if failed.load(Ordering::Relaxed) {
                    break;
                }
                if round % 997 == 0 {
                    let mut many = Vec::with_capacity(burst);
                    for _ in 0..burst {
                        let size = 1 + self.rng.below(SMALL_MAX);
                        let layout = Layout::from_size_align(size, 16)
                            .unwrap_or_else(|_| Layout::new::<u64>());
                        many.push(self.alloc(layout)?);
                    }
                    for (i, block) in many.into_iter().enumerate() {
                        if i % 2 == 0 {
                            self.free(block, "burst")?;
                        } else {
                            self.pass_on(block)?;
                        }
                    }
                }
                match self.rng.below(10) {
                    0..=4 => {
                        if live.len() >= 64 {
                            let block = live.swap_remove(self.rng.below(live.len()));
                            self.free(block, "full set")?;
                        }
                        let layout = self.rng.layout(self.largest);
                        live.push(self.alloc(layout)?);
                    }
                    5 | 6 if !live.is_empty() => {
                        let block = live.swap_remove(self.rng.below(live.len()));
                        self.free(block, "free")?;
                    }
                    7 if !live.is_empty() => {
                        let block = live.swap_remove(self.rng.below(live.len()));
                        self.pass_on(block)?;
                    }
                    8 => {
                        let block = match live.is_empty() {
                            true => {
                                let layout = self.rng.layout(self.largest);
                                self.alloc(layout)?
                            }
                            false => live.swap_remove(self.rng.below(live.len())),
                        };
                        live.push(self.realloc_chain(block)?);
                    }
                    _ => {
                        while let Ok(block) = from_previous.try_recv() {
                            self.done.freed_elsewhere += 1;
                            self.free(block, "freed by another thread")?;
                        }
                    }
                }
            }
            for block in live {
                self.free(block, "at the end")?;
            }
            Ok(())
        }
    }

    /// Runs `load` on `allocator`: threads in a ring, each allocating,
    /// filling, checking, reallocating and freeing blocks of every class,
    /// and passing some to the next thread, which checks and frees them.
    /// The first block found changed (or allocation failed) is the error.
    pub fn run<A: GlobalAlloc + Sync>(allocator: &A, load: Load) -> Result<Done, String> {
        let threads = load.threads.max(1);
        let (senders, receivers): (Vec<Sender<Block>>, Vec<Receiver<Block>>) =
            (0..threads).map(|_| unbounded()).unzip();
        let failed = AtomicBool::new(false);
        let results: Vec<Result<Done, String>> = std::thread::scope(|scope| {
            let handles: Vec<_> = receivers
                .into_iter()
                .enumerate()
                .map(|(t, from_previous)| {
                    // Thread t passes blocks to thread t + 1, and frees
                    // those of thread t - 1.
                    let next = senders[(t + 1) % threads].clone();
                    let failed = &failed;
                    scope.spawn(move || {
                        let mut worker = Worker {
                            allocator,
                            rng: Rng(0x5eed_0000 + u64::try_from(t).unwrap_or(0) * 7919 + 1),
                            serial: 0,
                            largest: load.largest,
                            done: Done::default(),
                            next: Some(next),
                        };
                        let mut outcome =
                            worker.run(load.rounds, load.burst, &from_previous, failed);
                        if outcome.is_err() {
                            failed.store(true, Ordering::Relaxed);
                        }
                        // Nothing more goes to the next thread: its receiver
                        // ends once every thread has dropped its sender.
                        worker.next = None;
                        while let Ok(block) = from_previous.recv() {
                            worker.done.freed_elsewhere += 1;
                            let freed = worker.free(block, "freed by another thread");
                            if outcome.is_ok() {
                                outcome = freed;
                            }
                        }
                        outcome.map(|()| worker.done)
                    })
                })
                .collect();
            drop(senders);
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("a stress thread panicked".into()))
                })
                .collect()
        });
        let mut total = Done::default();
        for result in results {
            total.add(result?);
        }
        Ok(total)
    }

    /// The hidden mode: [`SELF_TEST`] on `allocator`, said on stdout;
    /// the exit status.
    pub fn self_test<A: GlobalAlloc + Sync>(allocator: &A) -> i32 {
        let started = std::time::Instant::now();
        match run(allocator, SELF_TEST) {
            Ok(done) => {
                println!(
                    "allocator self-test: {} threads: {} allocations, {} reallocations, {} blocks freed by another thread, {} MiB checked, in {:.1} s: ok",
                    SELF_TEST.threads,
                    done.allocations,
                    done.reallocations,
                    done.freed_elsewhere,
                    done.bytes_checked >> 20,
                    started.elapsed().as_secs_f64()
                );
                0
            }
            Err(e) => {
                eprintln!("allocator self-test failed: {e}");
                1
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
            sorted.sort_unstable();
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
        // Miri interprets: a few rounds already interleave the threads.
        let rounds = if cfg!(miri) { 40 } else { 4000 };
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                std::thread::spawn(move || {
                    for round in 0..rounds {
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
    #[test]
    fn the_stress_on_every_class_from_many_threads_finds_every_block_intact() {
        // Four slabs, each class taking one when it is first used: the
        // region is used up, so small blocks also come from musl and go
        // back to it.
        let cache = BlockCache::with_region(4 * SLAB);
        // Miri interprets every byte written and checked: a few rounds of
        // two threads on blocks up to 2 KiB (the small classes and the
        // first power-of-two one) still pass blocks between them.
        let load = if cfg!(miri) {
            stress::Load {
                threads: 2,
                rounds: 24,
                burst: 8,
                largest: 2048,
            }
        } else {
            stress::Load {
                threads: 4,
                rounds: 150,
                burst: 600,
                largest: usize::MAX,
            }
        };
        let done = stress::run(&cache, load).unwrap();
        assert_eq!(
            cache.region.used.load(Ordering::Relaxed),
            cache.region.bytes,
            "the region was used up"
        );
        assert!(
            done.allocations >= u64::try_from(load.rounds).unwrap(),
            "{done:?}"
        );
        assert!(done.reallocations > 0, "{done:?}");
        assert!(done.freed_elsewhere > 0, "{done:?}");
        assert!(done.bytes_checked > 0, "{done:?}");
    }

    /// A broken allocator: it hands the block it gave out last to the next
    /// request that fits, while the first holder still has it.
    #[derive(Default)]
    struct HandsOutTwice {
        state: std::sync::Mutex<TwiceState>,
    }

    #[derive(Default)]
    struct TwiceState {
        /// The last block handed out and its real layout.
        last: Option<(Owned, Layout)>,
        /// Blocks handed out twice, by address: their real layout, and
        /// whether both holders still have them.
        shared: std::collections::HashMap<usize, (Layout, bool)>,
        /// Every block not yet freed, by address: what the stress leaves
        /// behind when it stops at the first changed block goes back to
        /// System when the allocator is dropped.
        live: std::collections::HashMap<usize, (Owned, Layout)>,
    }

    impl Drop for HandsOutTwice {
        fn drop(&mut self) {
            let state = self.state.get_mut().unwrap();
            for (_, (block, layout)) in state.live.drain() {
                // SAFETY: (test) System's block with its real layout, freed
                // by nobody.
                unsafe { System.dealloc(block.0, layout) };
            }
        }
    }

    /// A block pointer kept across threads.
    struct Owned(*mut u8);

    // SAFETY: (test) only an address kept under the mutex.
    unsafe impl Send for Owned {}

    // SAFETY: (test) blocks are System's, freed once, with their real layout.
    unsafe impl GlobalAlloc for HandsOutTwice {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let mut state = self.state.lock().unwrap();
            if let Some((block, real)) = state.last.take()
                && real.size() >= layout.size()
                && real.align() >= layout.align()
            {
                state.shared.insert(block.0.addr(), (real, true));
                return block.0;
            }
            // SAFETY: the caller's non-zero layout.
            let block = unsafe { System.alloc(layout) };
            state.last = Some((Owned(block), layout));
            state.live.insert(block.addr(), (Owned(block), layout));
            block
        }

        unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
            let mut state = self.state.lock().unwrap();
            if state.last.as_ref().is_some_and(|(b, _)| b.0 == block) {
                state.last = None;
            }
            let real = match state.shared.get_mut(&block.addr()) {
                Some((_, both @ true)) => {
                    *both = false;
                    return;
                }
                Some((real, false)) => *real,
                None => layout,
            };
            state.shared.remove(&block.addr());
            state.live.remove(&block.addr());
            // SAFETY: System's block, freed by its last holder.
            unsafe { System.dealloc(block, real) };
        }
    }

    #[test]
    fn the_stress_finds_a_block_handed_out_twice() {
        let broken = HandsOutTwice::default();
        let load = stress::Load {
            threads: 1,
            rounds: 300,
            burst: 4,
            largest: if cfg!(miri) { 4096 } else { usize::MAX },
        };
        let error = stress::run(&broken, load).unwrap_err();
        assert!(
            error.contains("changed: another holder wrote it"),
            "{error}"
        );
    }
}
