//! The web dashboard (`--ui-listen`) against the real binaries: a headless
//! Chromium loads it, sees the swarm's task graph, and watches the tasks
//! merge with no reload; without the operator credential it is refused.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

#[path = "dashboard/cdp.rs"]
mod cdp;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use swarm_tests::{
    Needs, PlanBuilder, TempRepo, WAIT, binary, sha256_hex, skip_for, spawn_controller, spawn_sidecar,
    stderr, stdout, swarmctl, task, wait_output, worker_script,
};

/// A port free a moment ago, for a flag that needs one before the start.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Where artifacts a person may want to look at after the run go.
fn artifacts() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<test> → target/test-artifacts
    exe.ancestors().nth(3).unwrap().join("test-artifacts")
}

struct Reply {
    status: u16,
    head: String,
    body: String,
}

/// One HTTP/1.1 request over a fresh connection; `extra` are header lines.
fn http(port: u16, method: &str, path: &str, extra: &[&str], body: &str) -> Reply {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    for h in extra {
        req.push_str(&format!("{h}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    conn.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Reply { status, head: head.to_ascii_lowercase(), body: body.to_string() }
}

fn create(url: &str, dir: &Path, plan: &str) {
    let path = dir.join("plan.toml");
    std::fs::write(&path, plan).unwrap();
    let out = swarmctl(url, &["create", path.to_str().unwrap()]);
    assert!(out.status.success(), "create: {}{}", stdout(&out), stderr(&out));
}

/// The graph's nodes as `task=STATE`, sorted.
const NODES: &str = "[...document.querySelectorAll('#dag .node')]\
    .map(n => n.dataset.task + '=' + n.dataset.state).sort().join(',')";

#[test]
fn dashboard_draws_the_task_graph_and_follows_merges_without_a_reload() {
    let chromium = match cdp::find_or_install() {
        Ok(p) => p,
        Err(why) => {
            return skip_for(
                "dashboard_draws_the_task_graph_and_follows_merges_without_a_reload",
                Needs::Chromium,
                &why,
            );
        }
    };
    let talk = "echo 'worker d says hello'; echo d > d.txt";
    let repo =
        TempRepo::with_files(&[("worker.sh", &worker_script(&[("d", talk)])), ("README.md", "dash\n")]);
    let port = free_port();
    let controller = spawn_controller(repo.path(), &[&format!("--ui-listen=127.0.0.1:{port}")]);
    let url = controller.url();
    // a ─► b ─┐
    //   └─► c ─┴─► d
    let plan = PlanBuilder::new("dash")
        .task(task("a"))
        .task(task("b").deps(&["a"]))
        .task(task("c").deps(&["a"]))
        .task(task("d").deps(&["b", "c"]))
        .build();
    let dir = tempfile::tempdir().unwrap();
    create(&url, dir.path(), &plan);

    let mut browser = cdp::Browser::launch(&chromium, &dir.path().join("chromium.log"));
    browser.navigate(&format!("http://127.0.0.1:{port}/#/swarm/dash"));
    browser.wait_for("the four tasks drawn", "document.querySelectorAll('#dag .node').length === 4", WAIT);
    // No sidecar yet: nothing can have run.
    assert_eq!(browser.eval(NODES), "a=READY,b=PENDING,c=PENDING,d=PENDING");
    assert_eq!(browser.eval("document.querySelectorAll('#dag .edge').length"), 4);
    // Layered by depth: a, then b and c in one column, then d.
    let x = |b: &mut cdp::Browser, t: &str| {
        b.eval(&format!("document.querySelector('#dag .node[data-task=\"{t}\"]').getBoundingClientRect().x"))
            .as_f64()
            .unwrap()
    };
    let (xa, xb, xc, xd) =
        (x(&mut browser, "a"), x(&mut browser, "b"), x(&mut browser, "c"), x(&mut browser, "d"));
    assert!(xa < xb && xb == xc && xc < xd, "columns by depth: a={xa} b={xb} c={xc} d={xd}");
    browser.wait_for("the live stream open", "document.getElementById('live').dataset.live === 'open'", WAIT);
    // A reload would lose this.
    browser.eval("window.stillTheSamePage = true");

    let _sidecars: Vec<_> = ["w1", "w2"].iter().map(|w| spawn_sidecar(&url, repo.path(), w, &[])).collect();
    browser.wait_for(
        "every node MERGED",
        &format!("{NODES} === 'a=MERGED,b=MERGED,c=MERGED,d=MERGED'"),
        WAIT,
    );
    assert_eq!(browser.eval("window.stillTheSamePage === true"), true, "the page was reloaded");
    // What each task was expected to take (learned from its directory's
    // other tasks, none has an estimate) and took, as swarmctl words it.
    browser.wait_for(
        "the durations of all four",
        "document.getElementById('swarm').innerText.includes('4 finished tasks expected')",
        WAIT,
    );
    let row = browser.eval("document.querySelector('#tasks tr[data-task=\"d\"]').innerText");
    assert!(row.as_str().is_some_and(|r| r.contains("(directory)")), "task d's row: {row}");
    browser.screenshot(&artifacts().join("dashboard-swarm.png"));

    // The task's page: its attempt, merge report, and the end of its worker
    // log, read from the sidecar that ran it.
    browser.eval("location.hash = '#/task/dash/d'");
    browser.wait_for(
        "task d's page",
        "!!document.querySelector('#task[data-task=\"d\"][data-state=\"MERGED\"]')",
        WAIT,
    );
    let text = browser.eval("document.getElementById('task').innerText").as_str().unwrap().to_string();
    assert!(text.contains("Attempt 1"), "attempt shown:\n{text}");
    assert!(browser.eval("!!document.querySelector('#merge-report')") == true, "merge report:\n{text}");
    assert!(browser.eval("!!document.querySelector('#events tr[data-kind=\"task.merged\"]')") == true);
    let log = browser.eval("document.getElementById('worker-log')?.innerText ?? ''");
    assert_eq!(log, "worker d says hello\n", "the worker log's tail:\n{text}");
    assert!(text.contains("attempt 1 on w"), "names the attempt and its sidecar:\n{text}");
    browser.screenshot(&artifacts().join("dashboard-task.png"));

    browser.eval("location.hash = '#/workers'");
    browser.wait_for(
        "both workers listed",
        "document.querySelectorAll('#workers tr[data-worker]').length === 2",
        WAIT,
    );
    assert_eq!(browser.eval("window.stillTheSamePage === true"), true, "the page was reloaded");
}

const OPERATOR: &str = "swarm_operator_secret";
const SIDECAR: &str = "swarm_sidecar_secret";

#[test]
fn dashboard_refuses_callers_without_the_operator_credential() {
    let repo = TempRepo::with_files(&[("README.md", "auth\n")]);
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(
        &tokens,
        format!(
            "[[tokens]]\nname = \"ci\"\nrole = \"sidecar\"\nworkers = \"*\"\nsha256 = \"{}\"\n\n\
             [[tokens]]\nname = \"alice\"\nrole = \"operator\"\nsha256 = \"{}\"\n",
            sha256_hex(SIDECAR),
            sha256_hex(OPERATOR)
        ),
    )
    .unwrap();
    let port = free_port();
    let _controller = spawn_controller(
        repo.path(),
        &[&format!("--tokens={}", tokens.display()), &format!("--ui-listen=127.0.0.1:{port}")],
    );
    let bearer = |t: &str| format!("Authorization: Bearer {t}");

    // Nothing: the page offers the login form, the API says why in JSON.
    let page = http(port, "GET", "/", &[], "");
    assert_eq!(page.status, 401, "{}", page.head);
    assert!(page.body.contains("action=\"/login\"") && page.body.contains("no credential"), "{}", page.body);
    assert!(!page.body.contains("/assets/app.js"), "the dashboard itself is not served");
    let api = http(port, "GET", "/api/swarms", &[], "");
    assert_eq!(api.status, 401);
    assert!(api.body.contains("\"error\""), "{}", api.body);
    let events = http(port, "GET", "/api/events", &[], "");
    assert_eq!(events.status, 401, "the live stream is guarded too");

    // A wrong token, a sidecar's token, a bad login: refused, no cookie.
    assert_eq!(http(port, "GET", "/api/swarms", &[&bearer("nope")], "").status, 401);
    let sidecar = http(port, "GET", "/api/swarms", &[&bearer(SIDECAR)], "");
    assert_eq!(sidecar.status, 403, "a sidecar's token is not an operator's: {}", sidecar.body);
    assert!(sidecar.body.contains("needs role operator"), "{}", sidecar.body);
    let wrong_link = http(port, "GET", "/?token=nope", &[], "");
    assert_eq!(wrong_link.status, 401);
    assert!(!wrong_link.head.contains("set-cookie"), "{}", wrong_link.head);
    let form = ["Content-Type: application/x-www-form-urlencoded"];
    let wrong_form = http(port, "POST", "/login", &form, "token=nope");
    assert_eq!(wrong_form.status, 401);
    assert!(!wrong_form.head.contains("set-cookie"));

    // The operator's token: as a header, or logged in as a cookie.
    assert_eq!(http(port, "GET", "/api/swarms", &[&bearer(OPERATOR)], "").status, 200);
    let login = http(port, "POST", "/login", &form, &format!("token={OPERATOR}"));
    assert_eq!(login.status, 303, "{}", login.head);
    let link = http(port, "GET", &format!("/?token={OPERATOR}"), &[], "");
    assert_eq!(link.status, 303, "{}", link.head);
    assert!(link.head.contains("location: /\r\n"), "the token leaves the address: {}", link.head);
    for h in [&login.head, &link.head] {
        assert!(
            h.contains(&format!("set-cookie: swarm_token={OPERATOR}; path=/; httponly; samesite=strict")),
            "{h}"
        );
    }
    let cookie = format!("Cookie: swarm_token={OPERATOR}");
    let with_cookie = http(port, "GET", "/api/swarms", &[&cookie], "");
    assert_eq!(with_cookie.status, 200, "{}", with_cookie.body);
    assert_eq!(with_cookie.body.trim(), "[]");
    let page = http(port, "GET", "/", &[&cookie], "");
    assert_eq!(page.status, 200);
    assert!(page.body.contains("/assets/app.js"));
    assert!(page.head.contains("content-security-policy: default-src 'self'"), "{}", page.head);
}

#[test]
fn dashboard_on_a_non_loopback_address_without_tls_and_credentials_is_refused() {
    let repo = TempRepo::with_files(&[("README.md", "refuse\n")]);
    let child = Command::new(binary("swarm-controller"))
        .args(["--listen=127.0.0.1:0", "--ui-listen=0.0.0.0:0", "--repo"])
        .arg(repo.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_output(child, WAIT);
    assert!(!out.status.success(), "it must not start: {}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains("--ui-listen 0.0.0.0:0") && err.contains("--tls-cert"), "{err}");
}

/// `curl` over HTTPS: the status code and the response headers.
fn curl(pki: &swarm_tests::Pki, url: &str, extra: &[String]) -> (u16, String) {
    let out = wait_output(
        Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-D", "-", "-w", "%{http_code}", "--cacert"])
            .arg(pki.file("ca.pem"))
            .args(extra)
            .arg(url)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        WAIT,
    );
    let text = stdout(&out);
    let code = text.get(text.len().saturating_sub(3)..).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, text.to_ascii_lowercase())
}

#[test]
fn dashboard_over_https_takes_a_client_certificate_or_a_token() {
    if Command::new("curl").arg("--version").output().is_err() {
        return skip_for(
            "dashboard_over_https_takes_a_client_certificate_or_a_token",
            Needs::Program("curl"),
            "curl is not installed",
        );
    }
    let repo = TempRepo::with_files(&[("README.md", "tls\n")]);
    let dir = tempfile::tempdir().unwrap();
    let pki = swarm_tests::Pki::init(&dir.path().join("pki"));
    let tokens = dir.path().join("tokens.toml");
    let entry =
        format!("[[tokens]]\nname = \"alice\"\nrole = \"operator\"\nsha256 = \"{}\"\n", sha256_hex(OPERATOR));
    std::fs::write(&tokens, entry).unwrap();
    let port = free_port();
    let _controller = spawn_controller(
        repo.path(),
        &[
            &format!("--tls-cert={}", pki.file("controller.pem")),
            &format!("--tls-key={}", pki.file("controller.key")),
            &format!("--client-ca={}", pki.file("ca.pem")),
            &format!("--tokens={}", tokens.display()),
            &format!("--ui-listen=127.0.0.1:{port}"),
        ],
    );
    let url = format!("https://localhost:{port}/api/swarms");
    let cert = |role: &str| {
        vec![
            "--cert".to_string(),
            pki.file(&format!("{role}.pem")),
            "--key".into(),
            pki.file(&format!("{role}.key")),
        ]
    };
    assert_eq!(curl(&pki, &url, &[]).0, 401, "no credential");
    assert_eq!(curl(&pki, &url, &cert("operator")).0, 200, "an operator's certificate");
    assert_eq!(curl(&pki, &url, &cert("admin")).0, 200, "an admin's certificate");
    assert_eq!(curl(&pki, &url, &cert("sidecar")).0, 403, "a sidecar's certificate");
    let bearer = vec!["-H".to_string(), format!("Authorization: Bearer {OPERATOR}")];
    assert_eq!(curl(&pki, &url, &bearer).0, 200, "a token");
    let (code, head) = curl(&pki, &format!("https://localhost:{port}/?token={OPERATOR}"), &[]);
    assert_eq!(code, 303);
    assert!(head.contains("httponly; samesite=strict; secure"), "over HTTPS the cookie is Secure: {head}");
}
