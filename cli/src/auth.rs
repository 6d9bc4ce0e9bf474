//! `swarmctl certs init` and `swarmctl token create`: the credentials a
//! multi-machine swarm needs, in one command each.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use anyhow::Context as _;
use rand::RngCore as _;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
    IsCa, KeyPair, KeyUsagePurpose, SanType,
};
use swarm_auth::cert::URI_PREFIX;
use swarm_auth::tokens;

use crate::cli::{CertsArgs, CertsCommand, TokenArgs, TokenCommand};
use crate::exit::Usage;

/// A new random bearer token: 256 bits, hex.
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("swarm_{hex}")
}

/// The `[[tokens]]` entry for `token`, as the controller's file holds it.
pub fn token_entry(name: &str, role: &str, workers: Option<&str>, token: &str) -> String {
    let mut entry = format!("[[tokens]]\nname = {name:?}\nrole = {role:?}\n");
    if let Some(w) = workers {
        entry.push_str(&format!("workers = {w:?}\n"));
    }
    entry.push_str(&format!("sha256 = \"{}\"\n", tokens::hash_hex(token)));
    entry
}

pub fn token(args: TokenArgs) -> anyhow::Result<()> {
    let TokenCommand::Create { role, workers, name } = args.command;
    let token = new_token();
    let entry = token_entry(&name, &role, workers.as_deref(), &token);
    // The controller's own parser, so what is printed is what it accepts.
    tokens::parse(&entry).map_err(|e| Usage(e.to_string().replace("tokens[0].", "--")))?;
    println!("token: {token}");
    println!("# Give the token to the client (--token, SWARM_TOKEN or --token-file);");
    println!("# add this entry to the controller's tokens file (--tokens); it holds only the hash:");
    print!("{entry}");
    Ok(())
}

pub fn certs(args: CertsArgs) -> anyhow::Result<()> {
    let CertsCommand::Init { dir, sans, workers, days } = args.command;
    swarm_auth::WorkerPattern::new(&workers).map_err(|e| Usage(format!("--workers {workers:?}: {e}")))?;
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let names = ["ca", "controller", "sidecar", "operator", "admin"];
    for n in names {
        for ext in ["pem", "key"] {
            let p = dir.join(format!("{n}.{ext}"));
            if p.exists() {
                return Err(Usage(format!("{} exists; certs init never overwrites", p.display())).into());
            }
        }
    }
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::default();
    ca.distinguished_name = dn("swarm CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages =
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    set_validity(&mut ca, days);
    let issuer = CertifiedIssuer::self_signed(ca, ca_key)?;
    write(&dir.join("ca.pem"), &issuer.pem(), 0o644)?;
    write(&dir.join("ca.key"), &issuer.key().serialize_pem(), 0o600)?;

    let mut controller_sans = vec![SanType::DnsName("localhost".try_into()?), san("127.0.0.1")?, san("::1")?];
    for s in &sans {
        controller_sans.push(san(s).map_err(|e| Usage(format!("--san {s:?}: {e}")))?);
    }
    let leaves: [(&str, &str, Vec<SanType>, ExtendedKeyUsagePurpose); 4] = [
        ("controller", "swarm controller", controller_sans, ExtendedKeyUsagePurpose::ServerAuth),
        (
            "sidecar",
            "swarm sidecar",
            vec![uri(&format!("worker/{workers}"))?],
            ExtendedKeyUsagePurpose::ClientAuth,
        ),
        ("operator", "swarm operator", vec![uri("operator/operator")?], ExtendedKeyUsagePurpose::ClientAuth),
        ("admin", "swarm admin", vec![uri("admin/admin")?], ExtendedKeyUsagePurpose::ClientAuth),
    ];
    for (file, cn, subject_alt_names, eku) in leaves {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = dn(cn);
        params.subject_alt_names = subject_alt_names;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![eku];
        params.use_authority_key_identifier_extension = true;
        set_validity(&mut params, days);
        let cert = params.signed_by(&key, &issuer)?;
        write(&dir.join(format!("{file}.pem")), &cert.pem(), 0o644)?;
        write(&dir.join(format!("{file}.key")), &key.serialize_pem(), 0o600)?;
    }
    println!("wrote CA and certificates to {}", dir.display());
    println!("  controller: --tls-cert controller.pem --tls-key controller.key --client-ca ca.pem");
    println!(
        "  sidecar:    --ca ca.pem --cert sidecar.pem --key sidecar.key  ({URI_PREFIX}worker/{workers})"
    );
    println!("  swarmctl:   --ca ca.pem --cert operator.pem --key operator.key  (or admin.pem/admin.key)");
    println!("keep ca.key offline: it can mint any identity");
    Ok(())
}

fn dn(cn: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    dn.push(DnType::OrganizationName, "swarm");
    dn
}

fn san(s: &str) -> anyhow::Result<SanType> {
    Ok(match s.parse::<std::net::IpAddr>() {
        Ok(ip) => SanType::IpAddress(ip),
        Err(_) => SanType::DnsName(s.try_into()?),
    })
}

fn uri(rest: &str) -> anyhow::Result<SanType> {
    Ok(SanType::URI(format!("{URI_PREFIX}{rest}").try_into()?))
}

/// Valid from yesterday (UTC; some clock skew is harmless) for `days` days.
fn set_validity(params: &mut CertificateParams, days: u32) {
    let today = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() / 86_400)
        .unwrap_or(0) as i64;
    let (y, m, d) = civil_from_days(today - 1);
    params.not_before = rcgen::date_time_ymd(y, m, d);
    let (y, m, d) = civil_from_days(today + i64::from(days));
    params.not_after = rcgen::date_time_ymd(y, m, d);
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil_from_days(z: i64) -> (i32, u8, u8) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y as i32, m as u8, d as u8)
}

fn write(path: &Path, text: &str, mode: u32) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(text.as_bytes()).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}
