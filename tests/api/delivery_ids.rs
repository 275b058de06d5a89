//! Delivery and attempt ids are opaque: they read back, page, and name only the caller's own
//! deliveries, but two of them say nothing of how many deliveries the platform made between.

use reqwest::Method;
use serde_json::{Value, json};
use sluice_testkit::receiver::{self, Behavior};

use super::{Sluice, assert_problem};

/// The 63 bits an id's 13 characters spell.
fn spelled(id: &str) -> u64 {
    let digits = id.split_once('_').expect("prefix").1;
    assert_eq!(digits.len(), 13, "{id}");
    digits.bytes().fold(0, |x, b| {
        let d = sluice::ids::ALPHABET.iter().position(|a| *a == b);
        x * 32 + d.unwrap_or_else(|| panic!("{id}: {} is not base32", b as char)) as u64
    })
}

fn ids_of(page: &Value) -> Vec<String> {
    page["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|d| d["id"].as_str().expect("id").to_owned())
        .collect()
}

#[tokio::test]
async fn delivery_ids_are_opaque_and_read_back() {
    const N: usize = 12;
    let s = Sluice::start_with(|_| {}).await;
    let (_, token) = s.tenant("acme").await;
    let (_, other) = s.tenant("globex").await;
    let rx = receiver::start(Behavior::Fast, true).await.unwrap();
    let ep = s.create_endpoint(&token, &rx.url(), json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for n in 0..N {
        s.send(&token, "order.paid", json!({ "n": n })).await;
    }
    let all = s
        .wait_for(
            &format!("/v1/endpoints/{ep}/deliveries?state=delivered&limit=500"),
            &token,
            |v| v["data"].as_array().is_some_and(|d| d.len() == N),
        )
        .await;
    // Listed in the order they were made (oldest first), yet their ids are neither in order
    // nor near one another: consecutive rows are far apart in what the ids spell.
    let ids = ids_of(&all);
    let numbers: Vec<u64> = ids.iter().map(|id| spelled(id)).collect();
    assert!(ids.iter().all(|id| id.starts_with("dlv_")), "{ids:?}");
    assert!(
        numbers.windows(2).any(|w| w[0] > w[1]) && numbers.windows(2).any(|w| w[0] < w[1]),
        "ids follow the order they were made in: {ids:?}"
    );
    assert!(
        numbers.windows(2).all(|w| w[0].abs_diff(w[1]) > 1 << 32),
        "neighbouring ids are close: {ids:?}"
    );

    // Each reads back, with its attempts naming it; pages of 5 walk the same list.
    for id in &ids {
        let d = s.get_ok(&format!("/v1/deliveries/{id}"), &token).await;
        assert_eq!(d["id"], id.as_str());
        let attempt = &d["attempt_log"][0];
        assert_eq!(attempt["delivery_id"], id.as_str());
        assert!(spelled(attempt["id"].as_str().unwrap()) > 0);
    }
    let mut paged = Vec::new();
    let mut after = String::new();
    loop {
        let page = s
            .get_ok(
                &format!("/v1/endpoints/{ep}/deliveries?limit=5{after}"),
                &token,
            )
            .await;
        paged.extend(ids_of(&page));
        match page["next"].as_str() {
            Some(next) => after = format!("&after={next}"),
            None => break,
        }
    }
    assert_eq!(paged, ids);

    // Another tenant cannot read or act on them.
    let id = &ids[0];
    for (method, path) in [
        (Method::GET, format!("/v1/deliveries/{id}")),
        (Method::GET, format!("/v1/deliveries/{id}/attempts")),
        (Method::POST, format!("/v1/deliveries/{id}/resend")),
        (Method::POST, format!("/v1/deliveries/{id}/replay")),
    ] {
        let r = s.call(method, &path, Some(&other), None).await;
        assert_problem(&r, 404, None);
    }
}

#[tokio::test]
async fn a_garbled_delivery_id_is_not_found_and_a_garbled_cursor_is_refused() {
    let s = Sluice::start_with(|_| {}).await;
    let (_, token) = s.tenant("acme").await;
    let rx = receiver::start(Behavior::Fast, true).await.unwrap();
    let ep = s.create_endpoint(&token, &rx.url(), json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let msg = s.send(&token, "order.paid", json!({})).await;
    let page = s
        .wait_for(&format!("/v1/messages/{msg}/deliveries"), &token, |v| {
            v["data"].as_array().is_some_and(|d| d.len() == 1)
        })
        .await;
    let id = page["data"][0]["id"].as_str().unwrap().to_owned();
    let digits = &id[4..];
    let flipped = {
        let last = digits.as_bytes()[12];
        let other = if last == b'0' { '1' } else { '0' };
        format!("dlv_{}{other}", &digits[..12])
    };
    for garbled in [
        flipped.clone(),
        id.to_uppercase(),
        format!("dlv_{}", digits.to_uppercase()),
        format!("dlv_{digits}0"),
        format!("dlv_{}", &digits[1..]),
        format!("att_{digits}"),
        digits.to_owned(),
        "dlv_1".to_owned(),
    ] {
        let r = s
            .call(
                Method::GET,
                &format!("/v1/deliveries/{garbled}"),
                Some(&token),
                None,
            )
            .await;
        assert_problem(&r, 404, None);
    }
    for garbled in [format!("dlv_{digits}0"), "dlv_42".to_owned()] {
        let r = s
            .call(
                Method::GET,
                &format!("/v1/endpoints/{ep}/deliveries?after={garbled}"),
                Some(&token),
                None,
            )
            .await;
        assert_problem(&r, 400, Some("after"));
    }
}
