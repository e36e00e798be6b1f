//! A provider's egress ranges as fetched, checked and stored: `edge ranges update` writes
//! the file, the edge and `edge-xdp` read it. Pure: bytes in, a checked list (or why it
//! is refused) out; the stored file's text both ways.
//!
//! A fetched list is refused whole, never trimmed: an empty list, one past the entry
//! bound, an entry that does not parse, or one broader than a provider could own (a /0
//! or anything wider than [`MIN_PREFIX_V4`] / [`MIN_PREFIX_V6`]) would make the edge
//! trust, or the NIC let through, far more than the provider.

use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ipnet::IpNet;

/// A checked list and when it was fetched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeList {
    /// Aggregated: sorted, overlaps merged, host bits cleared.
    pub nets: Vec<IpNet>,
    /// When the source last gave this list (Unix seconds).
    pub fetched_at: u64,
}

/// Why a fetched list, or a stored file, is refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ListError {
    /// The source says JSON (a pointer is configured) and the body is not.
    #[error("not JSON")]
    NotJson,
    /// Nothing at the configured pointer.
    #[error("nothing at {0}")]
    NoSuchPointer(String),
    /// The pointer leads to something else than an array of strings.
    #[error("{0} is not an array of strings")]
    NotAList(String),
    /// An entry is neither a CIDR nor an address.
    #[error("entry {index} ({text:?}) is not a CIDR or an address")]
    BadEntry {
        /// Its place in the list, from 0.
        index: usize,
        /// The entry, cut to 64 bytes.
        text: String,
    },
    /// An entry covers more than any provider owns.
    #[error("entry {0} is broader than /{MIN_PREFIX_V4} (IPv4) or /{MIN_PREFIX_V6} (IPv6)")]
    TooBroad(IpNet),
    /// No entries.
    #[error("empty")]
    Empty,
    /// More entries than `ranges.max_entries`.
    #[error("{count} entries, more than the {max} allowed")]
    TooMany {
        /// How many it had.
        count: usize,
        /// The configured bound.
        max: usize,
    },
    /// A stored file without its `# fetched_at:` line.
    #[error("no `# fetched_at:` line")]
    NoFetchedAt,
}

/// Checks a fetched body: text with one CIDR or address a line (`#` starts a comment)
/// when `pointer` is `None`, else JSON whose `pointer` (RFC 6901) names an array of them.
pub fn parse(
    body: &[u8],
    pointer: Option<&str>,
    max_entries: usize,
    fetched_at: SystemTime,
) -> Result<RangeList, ListError> {
    let entries: Vec<String> = match pointer {
        None => text_entries(&String::from_utf8_lossy(body)),
        Some(pointer) => json_entries(body, pointer)?,
    };
    if entries.is_empty() {
        return Err(ListError::Empty);
    }
    if entries.len() > max_entries {
        return Err(ListError::TooMany {
            count: entries.len(),
            max: max_entries,
        });
    }
    let nets = entries
        .iter()
        .enumerate()
        .map(|(index, entry)| checked_net(index, entry))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RangeList {
        nets: IpNet::aggregate(&nets),
        fetched_at: unix_seconds(fetched_at),
    })
}

impl RangeList {
    /// The stored file: who it came from and when, then a CIDR a line.
    pub fn render(&self, origin: &str) -> String {
        let mut text = format!(
            "# provider egress ranges from {origin}, written by `edge ranges update`\n{FETCHED_AT}{}\n",
            self.fetched_at
        );
        for net in &self.nets {
            text.push_str(&net.to_string());
            text.push('\n');
        }
        text
    }

    /// Reads a file [`RangeList::render`] wrote.
    pub fn read(text: &str) -> Result<RangeList, ListError> {
        let fetched_at = text
            .lines()
            .find_map(|line| line.strip_prefix(FETCHED_AT)?.trim().parse().ok())
            .ok_or(ListError::NoFetchedAt)?;
        let nets = text_entries(text)
            .iter()
            .enumerate()
            .map(|(index, entry)| checked_net(index, entry))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RangeList { nets, fetched_at })
    }

    /// How long ago it was fetched, at `now` (zero if the clock went back).
    pub fn age(&self, now: SystemTime) -> Duration {
        Duration::from_secs(unix_seconds(now).saturating_sub(self.fetched_at))
    }

    /// How many of `self`'s nets `other` lacks, and how many of its `self` lacks.
    pub fn changes_from(&self, other: &RangeList) -> (usize, usize) {
        let added = self.nets.iter().filter(|n| !other.nets.contains(n)).count();
        let removed = other.nets.iter().filter(|n| !self.nets.contains(n)).count();
        (added, removed)
    }
}

/// Networks asked "is this address in?" per connection and per request: each family's
/// nets as sorted, merged address intervals, so a lookup is a binary search however many
/// nets the provider lists hold (up to `ranges.max_entries` each). An IPv4-mapped IPv6
/// address (a dual-stack listener's view of an IPv4 peer) is looked up as IPv4.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetSet {
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
}

impl NetSet {
    /// The set of the addresses of `nets` (which may overlap, in any order).
    pub fn new<'a>(nets: impl IntoIterator<Item = &'a IpNet>) -> Self {
        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        for net in nets {
            match net {
                IpNet::V4(net) => v4.push((net.network().into(), net.broadcast().into())),
                IpNet::V6(net) => v6.push((net.network().into(), net.broadcast().into())),
            }
        }
        Self {
            v4: merged(v4),
            v6: merged(v6),
        }
    }

    /// Whether `ip` is in one of the nets.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match ip.to_canonical() {
            IpAddr::V4(ip) => within(&self.v4, u32::from(ip)),
            IpAddr::V6(ip) => within(&self.v6, u128::from(ip)),
        }
    }

    /// Whether no address is in the set.
    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }
}

/// Sorted by start, overlapping and adjacent intervals joined.
fn merged<T: Address>(mut intervals: Vec<(T, T)>) -> Vec<(T, T)> {
    intervals.sort_unstable();
    let mut out: Vec<(T, T)> = Vec::with_capacity(intervals.len());
    for (start, end) in intervals {
        match out.last_mut() {
            Some(last) if start <= last.1.saturating_next() => last.1 = last.1.max(end),
            _ => out.push((start, end)),
        }
    }
    out
}

/// An address as a number (`u32` for IPv4, `u128` for IPv6).
trait Address: Ord + Copy {
    fn saturating_next(self) -> Self;
}

impl Address for u32 {
    fn saturating_next(self) -> Self {
        self.saturating_add(1)
    }
}

impl Address for u128 {
    fn saturating_next(self) -> Self {
        self.saturating_add(1)
    }
}

fn within<T: Address>(intervals: &[(T, T)], address: T) -> bool {
    let after = intervals.partition_point(|&(start, _)| start <= address);
    after > 0 && address <= intervals[after - 1].1
}

fn text_entries(text: &str) -> Vec<String> {
    text.lines()
        .map(|line| line.split('#').next().unwrap_or_default().trim())
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect()
}

fn json_entries(body: &[u8], pointer: &str) -> Result<Vec<String>, ListError> {
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|_| ListError::NotJson)?;
    let list = value
        .pointer(pointer)
        .ok_or_else(|| ListError::NoSuchPointer(pointer.to_owned()))?;
    list.as_array()
        .and_then(|items| {
            items
                .iter()
                .map(|item| item.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
        })
        .ok_or_else(|| ListError::NotAList(pointer.to_owned()))
}

fn checked_net(index: usize, entry: &str) -> Result<IpNet, ListError> {
    let net = entry
        .parse::<IpNet>()
        .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| ListError::BadEntry {
            index,
            text: entry.chars().take(64).collect(),
        })?;
    let min = match net {
        IpNet::V4(_) => MIN_PREFIX_V4,
        IpNet::V6(_) => MIN_PREFIX_V6,
    };
    if net.prefix_len() < min {
        return Err(ListError::TooBroad(net));
    }
    Ok(net.trunc())
}

fn unix_seconds(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

const FETCHED_AT: &str = "# fetched_at: ";
/// The broadest IPv4 entry accepted (a provider's block is rarely wider than a /12).
pub const MIN_PREFIX_V4: u8 = 8;
/// The broadest IPv6 entry accepted (GitHub's widest is a /29).
pub const MIN_PREFIX_V6: u8 = 16;

#[cfg(test)]
mod tests {
    use super::*;

    const AT: Duration = Duration::from_secs(1_765_000_000);

    fn at() -> SystemTime {
        UNIX_EPOCH + AT
    }

    /// The shape of GitHub's `/meta` (its `hooks` list) and Stripe's `ips_webhooks.json`.
    #[test]
    fn provider_documents_give_their_lists() {
        let meta = br#"{"verifiable_password_authentication":false,"hooks":["192.30.252.0/22","185.199.108.0/22","140.82.112.0/20","143.55.64.0/20","2a0a:a440::/29","2606:50c0::/32"],"web":["1.2.3.0/24"]}"#;
        let github = parse(meta, Some("/hooks"), 100, at()).unwrap();
        assert_eq!(github.nets.len(), 6);
        assert!(github.nets.contains(&"2a0a:a440::/29".parse().unwrap()));
        assert!(!github.nets.contains(&"1.2.3.0/24".parse().unwrap()));
        let stripe = br#"{"WEBHOOKS":["3.18.12.63","3.130.192.231","13.235.14.237"]}"#;
        let stripe = parse(stripe, Some("/WEBHOOKS"), 100, at()).unwrap();
        assert_eq!(stripe.nets[0], "3.18.12.63/32".parse::<IpNet>().unwrap());
        assert_eq!(stripe.fetched_at, AT.as_secs());
    }

    #[test]
    fn text_lists_take_comments_and_are_aggregated() {
        let text = b"# partner egress\n10.1.0.0/24\n10.1.1.0/24 # second half\n\n10.1.0.7\n2001:db8::1/48\n";
        let list = parse(text, None, 100, at()).unwrap();
        let nets: Vec<String> = list.nets.iter().map(ToString::to_string).collect();
        assert_eq!(nets, ["10.1.0.0/23", "2001:db8::/48"]);
    }

    #[test]
    fn a_list_that_would_trust_too_much_is_refused_whole() {
        let refused = |body: &[u8], pointer| parse(body, pointer, 3, at()).unwrap_err();
        assert_eq!(
            refused(b"10.0.0.0/24\n0.0.0.0/0\n", None),
            ListError::TooBroad("0.0.0.0/0".parse().unwrap())
        );
        assert_eq!(
            refused(b"::/0", None),
            ListError::TooBroad("::/0".parse().unwrap())
        );
        assert_eq!(
            refused(b"10.0.0.0/7", None),
            ListError::TooBroad("10.0.0.0/7".parse().unwrap())
        );
        assert_eq!(refused(b"# nothing\n", None), ListError::Empty);
        assert_eq!(
            refused(b"10.0.0.1\n10.0.0.2\n10.0.0.3\n10.0.0.4\n", None),
            ListError::TooMany { count: 4, max: 3 }
        );
        assert_eq!(
            refused(b"10.0.0.1\nexample.com\n", None),
            ListError::BadEntry {
                index: 1,
                text: "example.com".into()
            }
        );
    }

    #[test]
    fn json_that_is_not_the_expected_shape_is_named() {
        let refused = |body: &[u8]| parse(body, Some("/hooks"), 10, at()).unwrap_err();
        assert_eq!(refused(b"<html>rate limited</html>"), ListError::NotJson);
        assert_eq!(
            refused(br#"{"message":"API rate limit exceeded"}"#),
            ListError::NoSuchPointer("/hooks".into())
        );
        assert_eq!(
            refused(br#"{"hooks":"192.30.252.0/22"}"#),
            ListError::NotAList("/hooks".into())
        );
        assert_eq!(
            refused(br#"{"hooks":["192.30.252.0/22",7]}"#),
            ListError::NotAList("/hooks".into())
        );
        assert_eq!(refused(br#"{"hooks":[]}"#), ListError::Empty);
    }

    #[test]
    fn a_stored_file_reads_back_with_its_age_and_changes_are_counted() {
        let list = parse(b"192.0.2.0/24\n2001:db8::/32\n", None, 10, at()).unwrap();
        let text = list.render("https://api.github.com/meta /hooks");
        assert_eq!(RangeList::read(&text), Ok(list.clone()));
        assert_eq!(
            list.age(at() + Duration::from_secs(90)),
            Duration::from_secs(90)
        );
        assert_eq!(list.age(at() - Duration::from_secs(90)), Duration::ZERO);
        assert_eq!(
            RangeList::read("192.0.2.0/24\n"),
            Err(ListError::NoFetchedAt)
        );
        let next = parse(b"192.0.2.0/24\n198.51.100.0/24\n", None, 10, at()).unwrap();
        assert_eq!(next.changes_from(&list), (1, 1));
    }

    #[test]
    fn a_net_set_answers_as_the_nets_do_for_every_address_of_a_crowded_block() {
        let mut seed = 0x9e37_79b9_u32;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        };
        for _ in 0..20 {
            let nets: Vec<IpNet> = (0..40)
                .map(|_| {
                    let prefix = 20 + (next() % 13) as u8;
                    let address = std::net::Ipv4Addr::from(0x0a00_0000 | (next() & 0xffff));
                    IpNet::V4(ipnet::Ipv4Net::new(address, prefix).unwrap().trunc())
                })
                .collect();
            let set = NetSet::new(&nets);
            for low in 0..=0xffff_u32 {
                let ip = IpAddr::V4((0x0a00_0000 | low).into());
                assert_eq!(
                    set.contains(ip),
                    nets.iter().any(|net| net.contains(&ip)),
                    "{ip} in {nets:?}"
                );
            }
        }
    }

    #[test]
    fn a_net_set_handles_the_ends_of_the_address_space_ipv6_and_mapped_addresses() {
        let nets: Vec<IpNet> = ["255.255.255.255/32", "0.0.0.0/8", "2001:db8::/32", "::/128"]
            .iter()
            .map(|n| n.parse().unwrap())
            .collect();
        let set = NetSet::new(&nets);
        let yes = [
            "255.255.255.255",
            "0.1.2.3",
            "2001:db8:ffff::1",
            "::",
            "::ffff:0.0.0.1",
        ];
        let no = [
            "255.255.255.254",
            "1.0.0.0",
            "2001:db9::",
            "::1",
            "::ffff:1.0.0.0",
        ];
        for ip in yes {
            assert!(set.contains(ip.parse().unwrap()), "{ip}");
        }
        for ip in no {
            assert!(!set.contains(ip.parse().unwrap()), "{ip}");
        }
        assert!(NetSet::default().is_empty() && !set.is_empty());
        assert!(NetSet::new(&["::/0".parse().unwrap()]).contains("ffff::1".parse().unwrap()));
    }
}
