//! The plaintext health port (`--health-listen`) that orchestrators probe:
//! liveness (service "") while the process runs, readiness only while the
//! controller serves the API — always without HA, only as the leader with
//! it, so a standby is alive but unready until it takes over.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use swarm_tests::{TempRepo, WAIT, poll, spawn_controller};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

const READINESS: &str = "swarm.v1.OperatorService";

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

async fn status(addr: &str, service: &str) -> Option<ServingStatus> {
    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://{addr}")).ok()?.connect().await.ok()?;
    let mut c = HealthClient::new(channel);
    let r = c.check(HealthCheckRequest { service: service.into() }).await.ok()?;
    ServingStatus::try_from(r.into_inner().status).ok()
}

async fn wait_status(addr: &str, service: &str, want: ServingStatus) {
    poll(&format!("{addr} health {service:?} to be {want:?}"), WAIT, || async {
        (status(addr, service).await? == want).then_some(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lone_controller_is_live_and_ready_on_its_health_port() {
    let repo = TempRepo::with_files(&[("README.md", "x\n")]);
    let health = free_addr();
    let _c = spawn_controller(repo.path(), &[&format!("--health-listen={health}")]);
    wait_status(&health, "", ServingStatus::Serving).await;
    wait_status(&health, READINESS, ServingStatus::Serving).await;
    // Only health is served there: the API is not reachable in the clear.
    let mut op = swarm_tests::try_operator(&format!("http://{health}")).await.unwrap();
    let refused = op.list_swarms(swarm_proto::v1::ListSwarmsRequest::default()).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unimplemented);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standby_is_live_but_unready_until_it_leads() {
    let Some(db) = swarm_tests::postgres::database("a_standby_is_live_but_unready_until_it_leads") else {
        return;
    };
    let repo = TempRepo::with_files(&[("README.md", "x\n")]);
    let (ha, hb) = (free_addr(), free_addr());
    let store = format!("--store={}", db.url);
    let mut a =
        spawn_controller(repo.path(), &[&store, "--leader-lease-ms=2000", &format!("--health-listen={ha}")]);
    wait_status(&ha, READINESS, ServingStatus::Serving).await;
    let _b =
        spawn_controller(repo.path(), &[&store, "--leader-lease-ms=2000", &format!("--health-listen={hb}")]);
    wait_status(&hb, "", ServingStatus::Serving).await;
    assert_eq!(status(&hb, READINESS).await, Some(ServingStatus::NotServing), "a standby is not ready");

    a.proc.kill9();
    wait_status(&hb, READINESS, ServingStatus::Serving).await;
}
