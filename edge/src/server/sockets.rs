//! Listening sockets and the socket options the edge relies on; every raw socket trick
//! (SO_REUSEPORT, TCP Fast Open, TCP_INFO, the open-files limit, CPU affinity) lives
//! here.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;

use anyhow::Context;
use socket2::{Domain, Protocol, Socket, Type};

use crate::config::ListenerSettings;

/// Binds `count` listeners on `addr`, one per worker, in one SO_REUSEPORT group: the
/// kernel spreads new connections over them by their addresses' hash, so no accept
/// crosses a thread. With port 0, all take the port the first was given.
pub(crate) fn bind_group(
    addr: SocketAddr,
    count: usize,
    settings: &ListenerSettings,
) -> anyhow::Result<Vec<std::net::TcpListener>> {
    let first = bind(addr, settings)?;
    let addr = first.local_addr()?;
    let mut group = vec![first];
    for _ in 1..count {
        group.push(bind(addr, settings)?);
    }
    Ok(group)
}

/// Binds a listener with SO_REUSEADDR, SO_REUSEPORT, TCP_FASTOPEN and the configured
/// backlog. IPv6 sockets are v6-only so `0.0.0.0:443` and `[::]:443` can both be listed.
pub(crate) fn bind(
    addr: SocketAddr,
    settings: &ListenerSettings,
) -> anyhow::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .with_context(|| format!("listen {addr}: socket"))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    if settings.tcp_fastopen_queue > 0 {
        set_tcp_fastopen(&socket, settings.tcp_fastopen_queue)
            .with_context(|| format!("listen {addr}: TCP_FASTOPEN"))?;
    }
    socket.set_nonblocking(true)?;
    socket
        .bind(&addr.into())
        .with_context(|| format!("listen {addr}: bind"))?;
    socket
        .listen(settings.backlog)
        .with_context(|| format!("listen {addr}: listen"))?;
    Ok(socket.into())
}

/// The CPUs this process may run on (its affinity mask, as systemd's `CPUAffinity=` or
/// `taskset` set it), in order.
pub(crate) fn allowed_cpus() -> std::io::Result<Vec<usize>> {
    use nix::sched::{CpuSet, sched_getaffinity};
    let set = sched_getaffinity(nix::unistd::Pid::from_raw(0))?;
    Ok((0..CpuSet::count())
        .filter(|cpu| set.is_set(*cpu).unwrap_or(false))
        .collect())
}

/// Pins the calling thread to `cpu`.
pub(crate) fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    use nix::sched::{CpuSet, sched_setaffinity};
    let mut set = CpuSet::new();
    set.set(cpu)?;
    // Pid 0 is the calling thread, not the whole process.
    sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)?;
    Ok(())
}

/// Raises the soft open-files limit to the hard one (every connection is a descriptor)
/// and returns it.
pub(crate) fn raise_open_files_limit() -> std::io::Result<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    }
    Ok(hard)
}

/// Connects to `host:port` (every resolved address in turn) with TCP Fast Open on
/// connect: once the kernel holds a cookie for the peer, a re-dial carries its first
/// bytes in the SYN. Where `net.ipv4.tcp_fastopen` does not allow it, the option is
/// ignored and the connect is an ordinary one.
pub(crate) async fn connect(host: &str, port: u16) -> std::io::Result<tokio::net::TcpStream> {
    let mut last_error = None;
    for addr in tokio::net::lookup_host((host, port)).await? {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        let _ = set_int_option(&socket, libc::TCP_FASTOPEN_CONNECT, 1);
        socket.set_tcp_nodelay(true)?;
        socket.set_nonblocking(true)?;
        let socket = tokio::net::TcpSocket::from_std_stream(socket.into());
        match socket.connect(addr).await {
            Ok(stream) => return Ok(stream),
            Err(e) => last_error = Some(e),
        }
    }
    Err(last_error.unwrap_or_else(|| std::io::Error::other(format!("{host}: no address"))))
}

/// Whether the client's SYN carried data (TCP Fast Open was used on this connection),
/// from the kernel's TCP_INFO.
pub(crate) fn syn_carried_data(stream: &tokio::net::TcpStream) -> bool {
    // SAFETY: tcp_info is plain integers, for which all-zero bytes are a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: a valid fd and an out-buffer of the size passed.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    rc == 0 && info.tcpi_options & TCPI_OPT_SYN_DATA != 0
}

/// `tcpi_options` bit: the SYN carried data (linux/tcp.h).
const TCPI_OPT_SYN_DATA: u8 = 32;

/// Server-side TFO needs the listener option (socket2 has no API for it) and bit 0x2 of
/// `net.ipv4.tcp_fastopen`; without the sysctl the option is accepted and unused.
fn set_tcp_fastopen(socket: &Socket, queue: u32) -> std::io::Result<()> {
    set_int_option(
        socket,
        libc::TCP_FASTOPEN,
        libc::c_int::try_from(queue).unwrap_or(libc::c_int::MAX),
    )
}

fn set_int_option(socket: &Socket, option: libc::c_int, value: libc::c_int) -> std::io::Result<()> {
    // SAFETY: a valid fd, and a pointer to a c_int with its exact size.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            option,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether an accept() error means the process or system is out of file descriptors
/// (the accept loop backs off instead of spinning or dying).
pub(crate) fn is_fd_exhaustion(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EMFILE) | Some(libc::ENFILE)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn binds_with_fastopen_on_v4_and_v6() {
        let settings = ListenerSettings {
            backlog: 128,
            tcp_fastopen_queue: 16,
            workers: None,
        };
        let v4 = bind("127.0.0.1:0".parse().unwrap(), &settings).unwrap();
        let port = v4.local_addr().unwrap().port();
        let socket = socket2::SockRef::from(&v4);
        let mut queue: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: valid fd and out-pointers sized for a c_int.
        let rc = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_FASTOPEN,
                (&mut queue as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!((rc, queue), (0, 16));
        if let Ok(v6) = bind(format!("[::1]:{port}").parse().unwrap(), &settings) {
            assert_eq!(
                v6.local_addr().unwrap().port(),
                port,
                "v6-only socket shares the port with v4"
            );
        }
    }

    #[test]
    fn a_group_shares_one_port_and_the_kernel_spreads_connections_over_it() {
        let settings = ListenerSettings {
            backlog: 128,
            tcp_fastopen_queue: 0,
            workers: None,
        };
        let group = bind_group("127.0.0.1:0".parse().unwrap(), 3, &settings).unwrap();
        let addr = group[0].local_addr().unwrap();
        assert!(group.iter().all(|l| l.local_addr().unwrap() == addr));
        let clients: Vec<_> = (0..60)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        let mut accepted = Vec::new();
        for listener in &group {
            listener.set_nonblocking(true).unwrap();
            accepted.push(std::iter::from_fn(|| listener.accept().ok()).count());
        }
        assert_eq!(accepted.iter().sum::<usize>(), clients.len());
        assert!(
            accepted.iter().all(|n| *n > 0),
            "every socket of the group gets connections: {accepted:?}"
        );
    }

    #[tokio::test]
    async fn connect_sets_fastopen_connect_and_reaches_the_peer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let stream = connect("localhost", port).await.unwrap();
        let socket = socket2::SockRef::from(&stream);
        let mut on: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: valid fd and out-pointers sized for a c_int.
        let rc = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_FASTOPEN_CONNECT,
                (&mut on as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!((rc, on), (0, 1));
        assert!(listener.accept().await.is_ok());
        assert!(connect("127.0.0.1", free_closed_port()).await.is_err());
    }

    fn free_closed_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }
}
