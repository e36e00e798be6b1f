//! Whether an XDP program is attached to an interface, asked of the kernel over netlink.

use futures::TryStreamExt;
use netlink_packet_route::link::{LinkAttribute, LinkXdp, XdpAttached};

pub(super) async fn attached(interface: &str) -> Result<String, String> {
    let (connection, handle, _) =
        rtnetlink::new_connection().map_err(|e| format!("netlink: {e}"))?;
    let task = tokio::spawn(connection);
    let result = async {
        let mut links = handle
            .link()
            .get()
            .match_name(interface.to_owned())
            .execute();
        let link = links
            .try_next()
            .await
            .map_err(|e| format!("{interface}: {e}"))?
            .ok_or_else(|| format!("{interface}: no such interface"))?;
        let mode = link.attributes.iter().find_map(|attr| match attr {
            LinkAttribute::Xdp(xdp) => xdp.iter().find_map(|x| match x {
                LinkXdp::Attached(mode) => Some(*mode),
                _ => None,
            }),
            _ => None,
        });
        match mode {
            None | Some(XdpAttached::None) => Err(format!("no XDP program on {interface}")),
            Some(mode) => Ok(format!("XDP attached to {interface} ({mode:?})")),
        }
    }
    .await;
    task.abort();
    result
}
