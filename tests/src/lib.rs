//! Test support: temp repositories, worker scripts, and the real binaries started as processes.
