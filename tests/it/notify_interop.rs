//! A WebSub subscriber no one here wrote — PyPI `flask-websub`'s `Subscriber`, in a Flask app
//! on 127.0.0.1 — discovers hub and topic from the topic URI's `Link` header, subscribes to
//! Tributary's built-in hub with a secret, answers its intent verification, and receives
//! change notifications that its own code checks against `X-Hub-Signature` (it hands a body to
//! its listeners only when the signature matches).
//!
//! One setting of the library is lifted: it refuses to send a secret to a hub that is not
//! https, and 127.0.0.1 has no TLS here, so the script replaces its `is_secure` check. Nothing
//! else is changed; the signature is checked by its `body_is_valid`.

use std::time::Duration;

use crate::support::net::free_port;
use crate::support::service::Service;
use crate::support::tools;

const SCRIPT: &str = r#"
import json, sys, threading, time, urllib.request
import flask_websub.subscriber as fws
from flask import Flask
from flask_websub.subscriber import Subscriber, SQLite3SubscriberStorage, SQLite3TempSubscriberStorage, discover

topic_page, port, db, wanted = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
fws.is_secure = lambda url: True  # a secret over plain HTTP: only 127.0.0.1 is involved

app = Flask(__name__)
app.config['SERVER_NAME'] = '127.0.0.1:%d' % port
sub = Subscriber(SQLite3SubscriberStorage(db), SQLite3TempSubscriberStorage(db))
app.register_blueprint(sub.build_blueprint(url_prefix='/callbacks'))
received, verified, errors = [], [], []
sub.add_listener(lambda topic, cb, body: received.append(body.decode('utf-8')))
sub.add_success_handler(lambda topic, cb, mode: verified.append(mode))
sub.add_error_handler(lambda topic, cb, reason: errors.append(reason))
threading.Thread(target=lambda: app.run(port=port, threaded=True), daemon=True).start()
for _ in range(100):
    try:
        urllib.request.urlopen('http://127.0.0.1:%d/ping' % port, timeout=1)
    except urllib.error.HTTPError:
        break
    except Exception:
        time.sleep(0.1)

with app.app_context():
    found = discover(topic_page)
    sub.subscribe(secret='flask-websub secret', lease_seconds=600, **found)

deadline = time.time() + 60
while time.time() < deadline and (not verified or len(received) < wanted) and not errors:
    time.sleep(0.2)
print('RESULT ' + json.dumps({'found': found, 'verified': verified, 'errors': errors, 'received': received}))
"#;

#[tokio::test]
async fn flask_websub_subscribes_and_checks_the_signatures() {
    let test = "notify_interop::flask_websub_subscribes_and_checks_the_signatures";
    let Some(python) = tools::flask_websub_python(test) else { return };
    let dir = tempfile::tempdir().unwrap();
    let (port, sim) = (free_port(), free_port());
    let config = format!(
        "[aggregator]\nbase_url = \"http://127.0.0.1:{port}/\"\nlisten = \"127.0.0.1:{port}\"\ndata_dir = \"store\"\n\
         user_agent = \"Tributary-test/0.1 (+mailto:test@example.org)\"\n\n[hub]\nallow_private = true\n\n\
         [[simulate]]\nid = \"sim\"\nlisten = \"127.0.0.1:{sim}\"\nresources = 20\nchange_rate = 2.0\nseed = 3\n\n\
         [[source]]\nid = \"sim\"\nurl = \"http://127.0.0.1:{sim}/.well-known/resourcesync\"\nallow_private = true\n\
         rate = \"unlimited\"\npoll = \"1s\"\n"
    );
    let s = Service::start(dir.path(), &config, &[], &[]).await;
    let script = dir.path().join("subscriber.py");
    std::fs::write(&script, SCRIPT).unwrap();
    let topic = format!("{}sets/sim/notifications", s.base);
    let mut cmd = tokio::process::Command::from(python.command());
    cmd.arg(&script).arg(&topic).arg(free_port().to_string()).arg(dir.path().join("fws.sqlite")).arg("2");
    cmd.kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output()).await.expect("the script ends").unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}\nlog:\n{}", s.log());
    // Flask prints its banner on stdout too.
    let line = stdout.lines().find_map(|l| l.strip_prefix("RESULT ")).unwrap_or_else(|| panic!("{stdout}\n{stderr}"));
    let report: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}\n{stderr}"));
    assert_eq!(report["found"]["topic_url"], topic.as_str(), "discovered from the topic's Link header");
    assert_eq!(report["found"]["hub_url"], format!("{}hub", s.base).as_str());
    assert_eq!(report["errors"], serde_json::json!([]), "{stderr}");
    assert_eq!(report["verified"], serde_json::json!(["subscribe"]), "{stderr}");
    let received = report["received"].as_array().unwrap();
    assert!(received.len() >= 2, "{stderr}\nlog:\n{}", s.log());
    for body in received {
        let body = body.as_str().unwrap();
        assert!(body.contains("<rs:md capability=\"change-notification\" from="), "{body}");
    }
}
