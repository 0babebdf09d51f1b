//! `scaler certs DIR`: what a machine without a cluster needs to run the metrics API as the
//! aggregation layer would see it: a CA, the gateway's serving certificate (localhost,
//! 127.0.0.1, ::1), a client certificate for the scaler under that CA, and a separate front-proxy
//! CA (the gateway's `--requestheader-client-ca-file`, which nobody here holds a certificate of,
//! so no one can assert a user in headers).

use std::path::{Path, PathBuf};

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};

/// The files written, by role.
#[derive(Debug)]
pub struct Files {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    pub front_proxy_ca: PathBuf,
}

fn ca(cn: &str) -> anyhow::Result<CertifiedIssuer<'static, KeyPair>> {
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, cn);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    Ok(CertifiedIssuer::self_signed(p, KeyPair::generate()?)?)
}

fn write(path: &Path, text: &str, private: bool) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    if private {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
}

/// Writes the certificates into `dir` (made if missing). `client_cn`/`client_org`: the scaler's
/// identity (user, group) as the gateway's authentication will see it.
pub fn generate(dir: &Path, client_cn: &str, client_org: &str) -> anyhow::Result<Files> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let f = Files {
        ca: dir.join("ca.crt"),
        server_cert: dir.join("server.crt"),
        server_key: dir.join("server.key"),
        client_cert: dir.join("client.crt"),
        client_key: dir.join("client.key"),
        front_proxy_ca: dir.join("front-proxy-ca.crt"),
    };
    let ca = ca("scaler-local-ca")?;
    write(&f.ca, &ca.pem(), false)?;

    let mut p = CertificateParams::new(vec!["localhost".to_owned()])?;
    p.subject_alt_names.push(SanType::IpAddress([127, 0, 0, 1].into()));
    p.subject_alt_names.push(SanType::IpAddress(std::net::Ipv6Addr::LOCALHOST.into()));
    p.distinguished_name.push(DnType::CommonName, "gateway-metrics-api");
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    let key = KeyPair::generate()?;
    let cert = p.signed_by(&key, &ca)?;
    write(&f.server_cert, &cert.pem(), false)?;
    write(&f.server_key, &key.serialize_pem(), true)?;

    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.distinguished_name.push(DnType::CommonName, client_cn);
    if !client_org.is_empty() {
        p.distinguished_name.push(DnType::OrganizationName, client_org);
    }
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    let key = KeyPair::generate()?;
    let cert = p.signed_by(&key, &ca)?;
    write(&f.client_cert, &cert.pem(), false)?;
    write(&f.client_key, &key.serialize_pem(), true)?;

    write(&f.front_proxy_ca, &self::ca("scaler-local-front-proxy-ca")?.pem(), false)?;
    Ok(f)
}
