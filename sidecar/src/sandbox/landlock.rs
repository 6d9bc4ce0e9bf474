//! Landlock: the kernel side of the sandbox. [`restrict_self`] applies a
//! [`Policy`] to the calling thread (and so to everything it later execs
//! and forks); [`probe`] learns what this kernel enforces by restricting a
//! throwaway thread, since a Landlock domain binds only the thread that
//! enters it and the threads and processes it starts afterwards.

use ::landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, LandlockStatus, NetPort, PathBeneath, PathFd,
    RestrictionStatus, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetError, RulesetStatus, Scope,
};

use super::Policy;

/// The newest ABI whose rights the sandbox asks for: file system with
/// `truncate` and device ioctls, TCP bind/connect by port, and scoped
/// signals and abstract Unix sockets.
const TARGET: ABI = ABI::V6;

/// What this kernel enforces of the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capability {
    /// The Landlock ABI in effect (0 when the kernel has none).
    pub abi: u32,
}

impl Capability {
    pub const NONE: Capability = Capability { abi: 0 };

    /// Everything the sandbox asks for is enforced.
    pub fn is_full(self) -> bool {
        self.abi >= TARGET as u32
    }

    /// The restrictions enforced, and those asked for but not, each with why.
    pub fn split(self) -> (Vec<String>, Vec<String>) {
        let features: [(&str, u32); 6] = [
            ("filesystem", 1),
            ("cross-directory links", 2),
            ("truncation", 3),
            ("network", 4),
            ("device ioctls", 5),
            ("signals and abstract sockets", 6),
        ];
        let mut enforced = Vec::new();
        let mut missing = Vec::new();
        for (name, since) in features {
            if self.abi >= since {
                enforced.push(name.to_string());
            } else if self.abi == 0 {
                missing.push(format!("{name} (the kernel has no Landlock)"));
            } else {
                missing.push(format!("{name} (needs Landlock ABI {since}, the kernel has {})", self.abi));
            }
        }
        (enforced, missing)
    }
}

/// Learns what the running kernel enforces, without confining this process.
pub fn probe() -> Capability {
    let probe = std::thread::Builder::new()
        .name("sandbox-probe".into())
        .spawn(|| restrict_self(&Policy::default()).ok());
    match probe.map(|t| t.join()) {
        Ok(Ok(Some(c))) => c,
        _ => Capability::NONE,
    }
}

fn capability_of(status: &RestrictionStatus) -> Capability {
    if status.ruleset == RulesetStatus::NotEnforced {
        return Capability::NONE;
    }
    match status.landlock {
        LandlockStatus::Available { effective_abi, .. } => Capability { abi: effective_abi as u32 },
        _ => Capability::NONE,
    }
}

/// Confines the calling thread to `policy`, as far as the kernel can.
/// Paths that do not exist are skipped: a rule cannot name them, and what
/// does not exist cannot be reached.
pub fn restrict_self(policy: &Policy) -> Result<Capability, RulesetError> {
    let abi = TARGET;
    let read = AccessFs::from_read(abi);
    let all = AccessFs::from_all(abi);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)?
        .handle_access(AccessNet::from_all(abi))?
        .scope(Scope::from_all(abi))?
        .create()?;
    let rules = policy
        .read
        .iter()
        .map(|p| (p, read))
        .chain(policy.write.iter().map(|p| (p, all)))
        .chain(policy.devices.iter().map(|p| (p, AccessFs::from_file(abi) & !AccessFs::Execute)));
    for (path, access) in rules {
        let Ok(fd) = PathFd::new(path) else { continue };
        // A file takes only the rights that apply to files.
        let access = if path.is_dir() { access } else { access & AccessFs::from_file(abi) };
        ruleset = ruleset.add_rule(PathBeneath::new(fd, access))?;
    }
    for &port in &policy.connect {
        ruleset = ruleset.add_rule(NetPort::new(port, AccessNet::ConnectTcp))?;
    }
    Ok(capability_of(&ruleset.restrict_self()?))
}
