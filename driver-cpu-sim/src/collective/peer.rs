//! Who is at the other end of a connection to this process's channel socket (Linux): the kernel
//! records the connecting process's pid and user (`SO_PEERCRED`), which no message can fake. An
//! abstract socket has no file permissions, so the host checks the user itself: only processes of
//! the user this process runs as may join its channels.

use std::ffi::{c_int, c_void};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

use hal::Error;

/// The kernel's record of a socket's peer (`struct ucred`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Credentials {
    /// The peer's process id, when it connected.
    pub(crate) pid: i32,
    /// Its effective user id.
    pub(crate) uid: u32,
    /// Its effective group id.
    pub(crate) gid: u32,
}

// `SOL_SOCKET` and `SO_PEERCRED`, which a few architectures number their own way.
#[cfg(any(target_arch = "mips", target_arch = "mips64", target_arch = "mips32r6", target_arch = "mips64r6"))]
const SOL_SOCKET_PEERCRED: (c_int, c_int) = (0xffff, 18);
#[cfg(any(target_arch = "powerpc", target_arch = "powerpc64"))]
const SOL_SOCKET_PEERCRED: (c_int, c_int) = (1, 21);
#[cfg(any(target_arch = "sparc", target_arch = "sparc64"))]
const SOL_SOCKET_PEERCRED: (c_int, c_int) = (0xffff, 0x40);
#[cfg(not(any(
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "mips32r6",
    target_arch = "mips64r6",
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "sparc",
    target_arch = "sparc64"
)))]
const SOL_SOCKET_PEERCRED: (c_int, c_int) = (1, 17);

unsafe extern "C" {
    fn getsockopt(socket: c_int, level: c_int, name: c_int, value: *mut c_void, length: *mut u32) -> c_int;
    safe fn geteuid() -> u32;
}

/// The credentials of `stream`'s peer, as the kernel recorded them when it connected.
pub(crate) fn of_peer(stream: &UnixStream) -> std::io::Result<Credentials> {
    let mut credentials = Credentials::default();
    let mut length = size_of::<Credentials>() as u32;
    let (level, name) = SOL_SOCKET_PEERCRED;
    // SAFETY: the descriptor is open for as long as `stream` is borrowed; `value` points to a
    // `struct ucred`-shaped, writable `Credentials` and `length` holds its size, so the kernel
    // writes at most that many bytes.
    let status = unsafe { getsockopt(stream.as_raw_fd(), level, name, (&raw mut credentials).cast(), &raw mut length) };
    if status != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if length as usize != size_of::<Credentials>() {
        return Err(std::io::Error::other(format!("SO_PEERCRED gave {length} bytes")));
    }
    Ok(credentials)
}

/// Admits a peer of this process's user; any other is `PermissionDenied`, naming both users.
pub(crate) fn admit(peer: Credentials) -> hal::Result<()> {
    let own = geteuid();
    if peer.uid == own {
        return Ok(());
    }
    Err(Error::permission_denied(format!(
        "cpu-sim: process {} of user {} may not join the channels of process {} (user {own}): only processes \
         of the same user may",
        peer.pid,
        peer.uid,
        std::process::id()
    )))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    #[test]
    fn a_socket_pair_of_this_process_shows_its_pid_and_user() {
        let (a, _b) = UnixStream::pair().unwrap();
        let credentials = of_peer(&a).unwrap();
        assert_eq!(credentials.pid, std::process::id() as i32);
        // The kernel owns /proc/self by the process's effective user: a second opinion.
        assert_eq!(credentials.uid, std::fs::metadata("/proc/self").unwrap().uid());
        assert_eq!(credentials.gid, std::fs::metadata("/proc/self").unwrap().gid());
        admit(credentials).expect("this process's own user");
    }

    #[test]
    fn a_peer_of_another_user_is_refused_naming_it() {
        let mut stranger = of_peer(&UnixStream::pair().unwrap().0).unwrap();
        stranger.uid = stranger.uid.wrapping_add(1);
        let refused = admit(stranger).unwrap_err();
        assert_eq!(refused.code(), hal::StatusCode::PermissionDenied, "{refused}");
        assert!(refused.message().contains(&format!("of user {}", stranger.uid)), "{refused}");
    }
}
