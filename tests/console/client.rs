//! A small browser stand-in: keeps cookies from `Set-Cookie`, never follows redirects (tests
//! look at them), submits forms with the page's CSRF token, and remembers every body it read
//! (to check that no token ever appears in a page).

use std::collections::BTreeMap;
use std::sync::Mutex;

use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use crate::support::{ADMIN, Sluice};

/// One response.
pub(crate) struct Page {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: String,
}

impl Page {
    /// The `Location` of a redirect.
    pub(crate) fn location(&self) -> &str {
        self.headers
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// Every `Set-Cookie` value.
    pub(crate) fn set_cookies(&self) -> Vec<String> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_owned))
            .collect()
    }

    /// A header's value.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The value of the first hidden field `name` (`csrf`, `token`).
    pub(crate) fn field(&self, name: &str) -> String {
        let needle = format!("name=\"{name}\" value=\"");
        let at = self
            .body
            .find(&needle)
            .unwrap_or_else(|| panic!("no field {name} in {}", self.body));
        let rest = &self.body[at + needle.len()..];
        rest[..rest.find('"').expect("closing quote")].to_owned()
    }

    /// The option a browser would submit for the select `name`: the one marked selected, or
    /// the first.
    pub(crate) fn selected(&self, name: &str) -> String {
        let needle = "<select id=";
        let select = self
            .body
            .match_indices(needle)
            .map(|(at, _)| &self.body[at..])
            .find(|rest| rest[..rest.find('>').unwrap_or(0)].contains(&format!("name=\"{name}\"")))
            .unwrap_or_else(|| panic!("no select {name} in {}", self.body));
        let select = &select[..select.find("</select>").expect("closing select")];
        let options: Vec<&str> = select.split("<option value=\"").skip(1).collect();
        let value = |o: &str| o[..o.find('"').expect("closing quote")].to_owned();
        options
            .iter()
            .find(|o| o[..o.find('>').unwrap_or(0)].contains("selected"))
            .or(options.first())
            .map(|o| value(o))
            .unwrap_or_else(|| panic!("select {name} has no options"))
    }
}

/// A cookie-keeping client for one "browser".
pub(crate) struct Client {
    http: reqwest::Client,
    pub base: String,
    cookies: Mutex<BTreeMap<String, String>>,
    pub seen: Mutex<Vec<String>>,
}

impl Client {
    pub(crate) fn new(base: &str) -> Self {
        sluice::delivery::install_tls_provider();
        Self {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
            base: base.to_owned(),
            cookies: Mutex::new(BTreeMap::new()),
            seen: Mutex::new(Vec::new()),
        }
    }

    /// The value of a cookie this client holds.
    pub(crate) fn cookie(&self, name: &str) -> Option<String> {
        self.cookies.lock().unwrap().get(name).cloned()
    }

    /// Replace the cookies (to replay a stolen or old cookie).
    pub(crate) fn set_cookie(&self, name: &str, value: &str) {
        self.cookies
            .lock()
            .unwrap()
            .insert(name.to_owned(), value.to_owned());
    }

    fn cookie_header(&self) -> String {
        self.cookies
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    async fn finish(&self, resp: reqwest::Response) -> Page {
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        for set in headers.get_all("set-cookie").iter() {
            let set = set.to_str().expect("ascii cookie");
            let (pair, attrs) = set.split_once(';').unwrap_or((set, ""));
            let (name, value) = pair.split_once('=').expect("name=value");
            let mut jar = self.cookies.lock().unwrap();
            if attrs.contains("Max-Age=0") {
                jar.remove(name);
            } else {
                jar.insert(name.to_owned(), value.to_owned());
            }
        }
        let body = resp.text().await.expect("body");
        self.seen.lock().unwrap().push(body.clone());
        Page {
            status,
            headers,
            body,
        }
    }

    /// GET a path (or a full URL).
    pub(crate) async fn get(&self, path: &str) -> Page {
        let url = if path.starts_with("http") {
            path.to_owned()
        } else {
            format!("{}{path}", self.base)
        };
        let resp = self
            .http
            .get(url)
            .header("cookie", self.cookie_header())
            .send()
            .await
            .expect("GET");
        self.finish(resp).await
    }

    /// GET a path, or say why no answer came (a fuzz case reports it instead of panicking).
    #[allow(dead_code)]
    pub(crate) async fn get_checked(&self, path: &str) -> Result<Page, String> {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .header("cookie", self.cookie_header())
            .send()
            .await
            .map_err(|e| format!("GET {path}: no answer ({e})"))?;
        Ok(self.finish(resp).await)
    }

    /// POST a same-origin form, or say why no answer came.
    #[allow(dead_code)]
    pub(crate) async fn post_checked(
        &self,
        path: &str,
        fields: &[(&str, &str)],
    ) -> Result<Page, String> {
        let body = serde_urlencoded::to_string(fields).expect("form");
        let resp = self
            .http
            .post(format!("{}{path}", self.base))
            .header("cookie", self.cookie_header())
            .header("content-type", "application/x-www-form-urlencoded")
            .header("sec-fetch-site", "same-origin")
            .body(body)
            .send()
            .await
            .map_err(|e| format!("POST {path} {fields:?}: no answer ({e})"))?;
        Ok(self.finish(resp).await)
    }

    /// POST a form with extra headers.
    pub(crate) async fn post_with(
        &self,
        path: &str,
        fields: &[(&str, &str)],
        headers: &[(&str, &str)],
    ) -> Page {
        let body = serde_urlencoded::to_string(fields).expect("form");
        let mut req = self
            .http
            .post(format!("{}{path}", self.base))
            .header("cookie", self.cookie_header())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        self.finish(req.send().await.expect("POST")).await
    }

    /// POST a form as a same-origin browser would.
    pub(crate) async fn post(&self, path: &str, fields: &[(&str, &str)]) -> Page {
        self.post_with(path, fields, &[("sec-fetch-site", "same-origin")])
            .await
    }

    /// POST a form with the CSRF token of `page` added.
    pub(crate) async fn submit(&self, path: &str, page: &Page, fields: &[(&str, &str)]) -> Page {
        let csrf = page.field("csrf");
        let mut all = vec![("csrf", csrf.as_str())];
        all.extend_from_slice(fields);
        self.post(path, &all).await
    }
}

/// Create a portal link with `token` (a tenant's, or the admin's naming a tenant).
pub(crate) async fn portal_link(s: &Sluice, token: &str, body: Value) -> (u16, Value) {
    s.post(token, "/v1/portal-links", body).await
}

/// A client signed in to `token`'s tenant portal through a fresh portal link.
pub(crate) async fn portal_client(s: &Sluice, token: &str) -> Client {
    let (status, link) = portal_link(s, token, json!({})).await;
    assert_eq!(status, 201, "{link}");
    let c = Client::new(&s.base);
    let enter = c.get(link["url"].as_str().expect("url")).await;
    assert_eq!(enter.status, 200, "{}", enter.body);
    let done = c
        .submit(
            "/console/enter",
            &enter,
            &[("token", &enter.field("token"))],
        )
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    assert_eq!(done.location(), "/console/portal/");
    c
}

/// A client signed in as the operator.
pub(crate) async fn admin_client(s: &Sluice) -> Client {
    let c = Client::new(&s.base);
    let login = c.get("/console/login").await;
    assert_eq!(login.status, 200);
    let done = c
        .submit("/console/login", &login, &[("token", ADMIN)])
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    assert_eq!(done.location(), "/console/admin/");
    c
}

/// The session cookie's name with the default (secure) settings.
pub(crate) const SESSION: &str = "__Host-sluice_console";
