//! Query strings of the dashboard's URLs: `key=value&…` pairs percent-decoded, values
//! percent-encoded. Pure; the server reads requests with it and the views build links.

/// `key=value&…` pairs of a query string, percent-decoded (`+` is a space).
pub fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `s` percent-encoded for a query value (everything but unreserved characters).
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_percent_decoded_and_encoding_round_trips() {
        assert_eq!(
            query_pairs("ns=a%2Fb&name=x+y&flag&bad=%zz"),
            [
                ("ns".to_string(), "a/b".to_string()),
                ("name".into(), "x y".into()),
                ("flag".into(), String::new()),
                ("bad".into(), "%zz".into())
            ]
        );
        let odd = "a b&c=d/é";
        assert_eq!(query_pairs(&format!("v={}", encode(odd)))[0].1, odd);
    }
}
