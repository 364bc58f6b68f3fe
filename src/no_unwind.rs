//! libunwind's functions for the static build, which never unwinds:
//! compiled only into it (`cfg(vl_no_unwind_tables)`, build.rs), whose
//! panics abort (src/main.rs refuses such a build otherwise). Defined
//! here, they keep libunwind out of the binary, and with it std's backtrace
//! support (docs/architecture.md, "Backends"; the savings in
//! docs/figures.md).
//!
//! std's default panic hook can print a backtrace, and so links std's
//! backtrace support: the stack walk through libunwind's
//! `_Unwind_Backtrace` and the symbolizer (gimli, addr2line, a DWARF
//! decompressor, the demangler). The launcher never runs that hook: `main`
//! replaces it first thing ([`crate::threads::exit_on_panic`]), and nothing
//! else in the binary captures a backtrace (no `std::backtrace`). Nor could
//! a walk get far: the static build is linked without Rust's unwind tables
//! (scripts/static-link.ld). But the hook is still referenced, from std's
//! panic entry, so the linker would keep it all. The symbolizer is reached
//! only from the callback that std passes to `_Unwind_Backtrace`; defined
//! here as a walk that finds no frames, in the same LTO module as std,
//! LLVM sees that the callback is never called and drops it and all that
//! only it reached.
//!
//! The other functions are what std's personality routine and its landing
//! pads (the standard library is compiled to unwind) refer to. With
//! `panic = "abort"` nothing ever starts an unwind (`_Unwind_RaiseException`
//! is not referenced at all), so the personality routine and the landing
//! pads never run; these abort, as a failed unwind would. With all of them
//! defined here no object of libunwind is linked, nor the C library's
//! `fprintf` and `dladdr` it calls. scripts/build-static.sh checks in the
//! linker's map that the crate defines `_Unwind_Backtrace` and
//! `_Unwind_Resume`; should std come to refer to one more libunwind
//! function, libunwind's object would be linked for it and the link would
//! fail on the symbols defined twice, rather than pass silently.

use std::ffi::{c_int, c_void};

/// libunwind's `_URC_END_OF_STACK`: the walk reached the last frame.
const END_OF_STACK: c_int = 5;

/// Reports the end of the stack at once, without calling `trace`: the
/// default hook (were it ever to run) prints `stack backtrace:` and no
/// frames.
#[unsafe(no_mangle)]
pub extern "C" fn _Unwind_Backtrace(
    _trace: Option<unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int>,
    _argument: *mut c_void,
) -> c_int {
    END_OF_STACK
}

/// Called at the end of a landing pad, which only an unwind runs.
#[unsafe(no_mangle)]
pub extern "C" fn _Unwind_Resume(_exception: *mut c_void) -> ! {
    std::process::abort()
}

/// The context accessors of the personality routine, which only an
/// unwind calls.
macro_rules! never_called {
    ($($name:ident($($arg:ty),*) -> $ret:ty;)*) => {$(
        #[unsafe(no_mangle)]
        pub extern "C" fn $name($(_: $arg),*) -> $ret {
            std::process::abort()
        }
    )*};
}

never_called! {
    _Unwind_GetLanguageSpecificData(*mut c_void) -> *mut c_void;
    _Unwind_GetRegionStart(*mut c_void) -> usize;
    _Unwind_GetTextRelBase(*mut c_void) -> usize;
    _Unwind_GetDataRelBase(*mut c_void) -> usize;
    _Unwind_GetIPInfo(*mut c_void, *mut c_int) -> usize;
    _Unwind_SetGR(*mut c_void, c_int, usize) -> ();
    _Unwind_SetIP(*mut c_void, usize) -> ();
}
