//! `memcpy` and `memmove` for the static musl build (x86_64).
//!
//! musl's x86_64 `memcpy` aligns the destination with single `movsb`
//! instructions, copies with `rep movsq` and finishes with `movsb` again.
//! Each string instruction is microcoded: a copy of a few bytes costs tens
//! of cycles. The launcher's JSON and XML work is made of such copies
//! (serde_json writes a string as up to three pieces, quick-xml and
//! `String` clones copy names and values of a few bytes), and in a profile
//! of a cached `query-domain` on the static binary `memcpy` took a large
//! share of the time, making the wire build several times slower than the
//! glibc build on the same work (docs/figures.md). This one copies up to
//! 32 bytes with two overlapping loads and stores and longer runs with
//! `rep movsb`, which current x86_64 CPUs run fast (ERMS), as glibc does.
//!
//! musl's `memmove` hands a copy that may go forwards to that `memcpy`, and
//! copies the others (the destination above an overlapping source)
//! backwards with `std; rep movsb`: one byte at a time, as the fast string
//! microcode works only forwards. Every insert into a B-tree node or a
//! sorted vector shifts the tail up that way, and serde_json's objects are
//! B-trees: building a reply object or parsing a request's arguments makes
//! such moves of tens to hundreds of bytes. Ours copies those backwards in
//! 16-byte pieces.
//!
//! Linked in place of musl's: the binary's own definitions win over the
//! archive members, and `__memcpy_fwd` (musl's name for its forward copy)
//! is defined too, so that musl's `memcpy.o` and `memmove.o` are never
//! pulled in. Both copy forward and read every byte of a short copy before
//! writing any, so overlapping forward copies stay correct. Other builds
//! keep their C library's functions; ours are compiled everywhere so that
//! their unit tests run.

use std::arch::asm;
use std::ptr;

/// Copies `n` bytes from `src` to `dest`; returns `dest`.
///
/// # Safety
/// As C's `memcpy`: `src` readable and `dest` writable for `n` bytes. The
/// ranges may overlap only if `dest` is not above `src` (a forward copy,
/// as musl's `memmove` asks of `__memcpy_fwd`).
#[cfg_attr(all(target_env = "musl", target_arch = "x86_64"), unsafe(no_mangle))]
pub unsafe extern "C" fn memcpy(dest: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: the caller guarantees both ranges for `n` bytes; every access
    // below is within them (unaligned loads and stores of 1, 4, 8 or 16
    // bytes at offsets 0 and n - size, or `rep movsb` over exactly n bytes).
    // Short copies load everything before storing, long ones copy upwards
    // byte by byte, so a forward overlapping copy is correct too.
    unsafe {
        if n <= 32 {
            if n >= 16 {
                let a = ptr::read_unaligned(src.cast::<u128>());
                let b = ptr::read_unaligned(src.add(n - 16).cast::<u128>());
                ptr::write_unaligned(dest.cast::<u128>(), a);
                ptr::write_unaligned(dest.add(n - 16).cast::<u128>(), b);
            } else if n >= 8 {
                let a = ptr::read_unaligned(src.cast::<u64>());
                let b = ptr::read_unaligned(src.add(n - 8).cast::<u64>());
                ptr::write_unaligned(dest.cast::<u64>(), a);
                ptr::write_unaligned(dest.add(n - 8).cast::<u64>(), b);
            } else if n >= 4 {
                let a = ptr::read_unaligned(src.cast::<u32>());
                let b = ptr::read_unaligned(src.add(n - 4).cast::<u32>());
                ptr::write_unaligned(dest.cast::<u32>(), a);
                ptr::write_unaligned(dest.add(n - 4).cast::<u32>(), b);
            } else if n > 0 {
                let a = *src;
                let b = *src.add(n / 2);
                let c = *src.add(n - 1);
                *dest = a;
                *dest.add(n / 2) = b;
                *dest.add(n - 1) = c;
            }
        } else {
            // The direction flag is clear on function entry (System V ABI).
            asm!(
                "rep movsb",
                inout("rcx") n => _,
                inout("rdi") dest => _,
                inout("rsi") src => _,
                options(nostack, preserves_flags)
            );
        }
    }
    dest
}

/// Copies `n` bytes from `src` to `dest`, which may overlap; returns `dest`.
///
/// # Safety
/// As C's `memmove`: `src` readable and `dest` writable for `n` bytes.
#[cfg_attr(all(target_env = "musl", target_arch = "x86_64"), unsafe(no_mangle))]
pub unsafe extern "C" fn memmove(dest: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: the caller guarantees both ranges for `n` bytes. A copy that
    // can go forwards (the destination not above the source, or past its
    // end) and a short one (every byte loaded before any is stored) are
    // `memcpy`'s. Otherwise `dest` is above `src` within `n` bytes: each
    // 16-byte piece, from the top down, is read before any store reaches
    // it (stores land `dest - src` bytes above what was read), and the
    // last, shorter piece at the bottom is one of memcpy's short copies.
    unsafe {
        if (dest as usize).wrapping_sub(src as usize) >= n || n <= 32 {
            return memcpy(dest, src, n);
        }
        let mut left = n;
        while left >= 16 {
            left -= 16;
            // In assembly: LLVM would turn a loop of plain loads and stores
            // back into a call to `memmove`, this very function.
            asm!(
                "movdqu {piece}, xmmword ptr [{src} + {at}]",
                "movdqu xmmword ptr [{dest} + {at}], {piece}",
                src = in(reg) src,
                dest = in(reg) dest,
                at = in(reg) left,
                piece = out(xmm_reg) _,
                options(nostack, preserves_flags)
            );
        }
        memcpy(dest, src, left);
    }
    dest
}

/// musl's internal name for its forward `memcpy`, called by its `memmove`.
///
/// # Safety
/// As [`memcpy`].
#[cfg(all(target_env = "musl", target_arch = "x86_64"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __memcpy_fwd(dest: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: the same contract, passed on.
    unsafe { memcpy(dest, src, n) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_every_length_and_alignment_exactly() {
        let src: Vec<u8> = (0..200u8)
            .map(|i| i.wrapping_mul(7).wrapping_add(3))
            .collect();
        for len in 0..140 {
            for offset in 0..9 {
                let mut dest = vec![0xEEu8; 160];
                // SAFETY: both ranges are inside their vectors.
                let ret =
                    unsafe { memcpy(dest.as_mut_ptr().add(offset), src.as_ptr().add(3), len) };
                assert_eq!(ret, dest[offset..].as_mut_ptr());
                assert_eq!(&dest[offset..offset + len], &src[3..3 + len], "len {len}");
                assert!(dest[..offset].iter().all(|&b| b == 0xEE));
                assert!(dest[offset + len..].iter().all(|&b| b == 0xEE));
            }
        }
    }

    #[test]
    fn memmove_copies_every_overlap_both_ways() {
        for len in 0..150 {
            for from in 0..40 {
                for to in 0..40 {
                    let mut buf: Vec<u8> = (0..200u8).map(|i| i.wrapping_mul(13)).collect();
                    let mut want = buf.clone();
                    want.copy_within(from..from + len, to);
                    // SAFETY: both ranges are inside `buf`.
                    let ret =
                        unsafe { memmove(buf.as_mut_ptr().add(to), buf.as_ptr().add(from), len) };
                    assert_eq!(ret, buf[to..].as_mut_ptr());
                    assert_eq!(buf, want, "len {len} from {from} to {to}");
                }
            }
        }
    }

    #[test]
    fn a_forward_overlapping_copy_is_a_memmove() {
        for len in 0..100 {
            for shift in 1..20 {
                let mut buf: Vec<u8> = (0..140u8).collect();
                let mut want = buf.clone();
                want.copy_within(shift..shift + len, 0);
                // SAFETY: both ranges are inside `buf`; dest is below src.
                unsafe {
                    memcpy(buf.as_mut_ptr(), buf.as_ptr().add(shift), len);
                }
                assert_eq!(buf, want, "len {len} shift {shift}");
            }
        }
    }
}
