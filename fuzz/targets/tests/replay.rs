//! Every input the fuzzer kept (`fuzz/regressions/<target>/*`) through its
//! target again: a crash or hang once found stays fixed.

use std::path::Path;

#[test]
fn every_kept_fuzz_input_still_passes_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../regressions");
    let mut replayed = 0;
    for (name, target) in swarm_fuzz_targets::TARGETS {
        let Ok(entries) = std::fs::read_dir(root.join(name)) else { continue };
        for entry in entries.flatten() {
            let input = std::fs::read(entry.path()).unwrap_or_default();
            target(&input);
            replayed += 1;
        }
    }
    let dirs = std::fs::read_dir(&root).map(|d| d.count()).unwrap_or(0);
    assert!(dirs > 0, "no regression inputs under {}", root.display());
    eprintln!("replayed {replayed} kept inputs");
}

#[test]
fn every_target_returns_for_empty_and_garbage_input() {
    for (_, target) in swarm_fuzz_targets::TARGETS {
        target(b"");
        target(&[0xff; 64]);
        target(b"{\"type\":\"system\"}\n[[tasks]]\nid = 1\n");
    }
}
