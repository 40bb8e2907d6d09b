//! The global allocator (mimalloc) and the two options that keep the
//! resident set small at rest.
//!
//! mimalloc is used because glibc's malloc/free contend across the
//! runtime's threads and cost a visible share of a GraphQL request's CPU
//! (bench/RESULTS.md). Left at its defaults it commits its first arena
//! eagerly and returns freed memory to the OS only when later allocations
//! give it a chance to, which an idle server never does: the 19 MiB blocks
//! of each argon2id hash made while bootstrapping users stayed resident
//! (bench/RESULTS.md, "Memory at rest"). So the binary turns eager arena
//! commit off before the allocator reserves its first arena (an
//! eagerly committed arena's purged pages stay counted as resident) and,
//! once start-up is done, asks mimalloc to return what is free
//! ([`release_free_memory`]).
//!
//! This is the only `unsafe` code of the project: mimalloc's options are
//! reachable only through its C interface (environment variables aside,
//! which a binary cannot set for itself before the allocator reads them).
#![allow(unsafe_code)]

use libmimalloc_sys::mi_option_t;

// mimalloc v3's option numbers (`mi_option_e` in its mimalloc.h); the
// Rust bindings name only some of them, and some by their v2 numbers. A
// test below checks them against their documented defaults.
const ARENA_EAGER_COMMIT: mi_option_t = 4;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Sets the allocator's options before anything allocates: mimalloc
/// reserves its first arena on the process's first allocation, which may
/// come before `main` (its own start-up, the C runtime's, std's). A
/// prioritised `.init_array` entry runs before the unprioritised
/// constructors, mimalloc's among them.
#[cfg(all(target_os = "linux", not(test)))]
#[used]
#[unsafe(link_section = ".init_array.00200")]
static CONFIGURE: extern "C" fn() = configure;

#[cfg(all(target_os = "linux", not(test)))]
extern "C" fn configure() {
    // SAFETY: `mi_option_set` takes any option number and value and only
    // records them (marking the option set, so the environment does not
    // override it); mimalloc reads this one when it reserves an arena.
    unsafe { libmimalloc_sys::mi_option_set(ARENA_EAGER_COMMIT, 0) };
}

/// Returns freed memory to the OS now rather than on the allocator's
/// next chance: after start-up, when bootstrap hashing has freed its
/// buffers and the server may sit idle.
pub fn release_free_memory() {
    // SAFETY: `mi_collect` frees nothing a caller holds; it only returns
    // pages with no live blocks to the OS.
    unsafe { libmimalloc_sys::mi_collect(true) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_numbers_are_mimalloc_v3s() {
        // The defaults of this build of mimalloc: arena_eager_commit = 2
        // and purge_delay (option 15) = 1000 ms. Test binaries do not run
        // `configure`, so reading them pins the numbering.
        // SAFETY: reading an option has no side effect beyond initialising it.
        let (eager, purge_delay) = unsafe {
            (
                libmimalloc_sys::mi_option_get(ARENA_EAGER_COMMIT),
                libmimalloc_sys::mi_option_get(15),
            )
        };
        assert_eq!((eager, purge_delay), (2, 1000));
    }
}
