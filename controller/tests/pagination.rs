//! Lists come a page at a time: every item once, in order, however the
//! pages fall; a bad page size or token is refused naming the field.

mod support;

use support::*;
use swarm_proto::v1;
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_list_pages_through_every_task_once_in_plan_order() {
    let h = Harness::start().await;
    let tasks: String =
        (0..25).map(|i| format!("[[tasks]]\nid = \"t{i:02}\"\nfiles = [\"t{i}.txt\"]\n")).collect();
    h.create(&format!("name = \"s\"\n[defaults]\ncommand = \"true\"\n{tasks}")).await;
    let mut op = h.operator();
    let (mut seen, mut token, mut pages) = (Vec::new(), String::new(), 0);
    loop {
        let req = v1::ListTasksRequest {
            swarm_id: "s".into(),
            page_size: 10,
            page_token: token.clone(),
            ..Default::default()
        };
        let page = op.list_tasks(req).await.expect("list").into_inner();
        assert!(page.tasks.len() <= 10);
        seen.extend(page.tasks.into_iter().map(|t| t.id));
        pages += 1;
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
        assert!(pages < 10, "the pages never end");
    }
    let expected: Vec<String> = (0..25).map(|i| format!("t{i:02}")).collect();
    assert_eq!(seen, expected);
    assert_eq!(pages, 3);

    // A state filter pages too: every task is PENDING or READY here.
    let ready = v1::ListTasksRequest {
        swarm_id: "s".into(),
        states: vec![v1::TaskState::Ready as i32, v1::TaskState::Pending as i32],
        page_size: 24,
        ..Default::default()
    };
    let first = op.list_tasks(ready.clone()).await.expect("list").into_inner();
    assert_eq!(first.tasks.len(), 24);
    let rest = op
        .list_tasks(v1::ListTasksRequest { page_token: first.next_page_token, ..ready })
        .await
        .expect("list")
        .into_inner();
    assert_eq!(rest.tasks.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), vec!["t24"]);
    assert!(rest.next_page_token.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_pages_are_refused_naming_the_field() {
    let h = Harness::start().await;
    h.create("name = \"s\"\n[defaults]\ncommand = \"true\"\n[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\n")
        .await;
    let mut op = h.operator();
    let cases = [
        (v1::ListTasksRequest { swarm_id: "s".into(), page_size: 10_001, ..Default::default() }, "page_size"),
        (
            v1::ListTasksRequest { swarm_id: "s".into(), page_token: "zz".into(), ..Default::default() },
            "page_token",
        ),
        (
            v1::ListTasksRequest { swarm_id: "s".into(), page_token: "7".into(), ..Default::default() },
            "page_token",
        ),
    ];
    for (req, field) in cases {
        let e = op.list_tasks(req.clone()).await.expect_err("refused");
        assert_eq!(e.code(), Code::InvalidArgument, "{req:?}");
        assert!(e.message().contains(field), "{req:?}: {}", e.message());
    }
    let e = op
        .list_workers(v1::ListWorkersRequest { page_size: 1_000_000, ..Default::default() })
        .await
        .expect_err("refused");
    assert_eq!(e.code(), Code::InvalidArgument);
    // Workers and swarms page by their sort key: two swarms, one a page.
    h.create("name = \"t\"\n[defaults]\ncommand = \"true\"\n[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\n")
        .await;
    let first = op
        .list_swarms(v1::ListSwarmsRequest { page_size: 1, ..Default::default() })
        .await
        .expect("list")
        .into_inner();
    let second = op
        .list_swarms(v1::ListSwarmsRequest { page_size: 1, page_token: first.next_page_token.clone() })
        .await
        .expect("list")
        .into_inner();
    let ids: Vec<&str> = first.swarms.iter().chain(&second.swarms).map(|s| s.id.as_str()).collect();
    assert_eq!(ids, vec!["s", "t"]);
    assert!(second.next_page_token.is_empty());
}
