//! spoke-nfs4: the agent's NFSv4.1 hub client, a C interface over nfs-rs.
//!
//! The protocol is nfs-rs's; what the agent needs on top is here:
//! - every call is bounded by the client's deadline and always answers through its callback
//!   (the crate's own timeouts are fixed and long);
//! - recovery is the agent's: a call that fails for the connection or the session (hub
//!   restart, reset, lease or session lost) makes the client mount again — a new connection,
//!   client id and session — and idempotent calls are sent once more on the new mount within
//!   what is left of their deadline. The crate's own health call is not trusted for this.
//! - errors are errno values with a message that names the call.
//!
//! One client speaks for one AUTH_SYS identity (uid/gid in the URL): the agent keeps one per
//! identity. Reply pointers are valid only during the callback.

use std::ffi::{CStr, CString, c_char, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use nfs_rs::{Attr, DirectoryCookie, Mount, Nfs4ErrorCode, NfsError, Time};
use tokio::runtime::Runtime;

fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("spoke-nfs4")
            .enable_all()
            .build()
            .expect("spoke-nfs4: cannot start the I/O runtime")
    })
}

// ---- the C side of the interface (mirrored in spoke_nfs4.h) ----

#[repr(C)]
#[derive(Default, Clone, Copy)]
pub struct SpokeNfs4Attr {
    pub type_: u32, // 1 file, 2 directory, 3 block, 4 char, 5 symlink, 6 socket, 7 fifo
    pub mode: u32,  // permission bits
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev_major: u32,
    pub rdev_minor: u32,
    pub size: u64,
    pub used: u64,
    pub fsid: u64,
    pub fileid: u64,
    pub atime_sec: u64,
    pub atime_nsec: u32,
    pub mtime_sec: u64,
    pub mtime_nsec: u32,
    pub ctime_sec: u64,
    pub ctime_nsec: u32,
}

#[repr(C)]
pub struct SpokeNfs4Entry {
    pub name: *const c_char,
    pub has_attr: i32,
    pub attr: SpokeNfs4Attr,
    pub fh: *const u8,
    pub fh_len: usize,
}

#[repr(C)]
pub struct SpokeNfs4Reply {
    pub error: i32,             // 0, or an errno
    pub message: *const c_char, // why, naming the call; "" on success
    pub has_attr: i32,
    pub attr: SpokeNfs4Attr,
    pub fh: *const u8,
    pub fh_len: usize,
    pub data: *const u8, // READ bytes, or a READLINK target
    pub data_len: usize,
    pub eof: i32,
    pub count: u64, // WRITE: bytes the hub took
    pub entries: *const SpokeNfs4Entry,
    pub entry_count: usize,
    pub total_bytes: u64,
    pub free_bytes: u64,
    pub avail_bytes: u64,
    pub total_files: u64,
    pub free_files: u64,
}

pub type SpokeNfs4Done = extern "C" fn(ctx: *mut c_void, reply: *const SpokeNfs4Reply);

#[repr(C)]
pub struct SpokeNfs4SetAttr {
    pub set_mode: i32,
    pub mode: u32,
    pub set_uid: i32,
    pub uid: u32,
    pub set_gid: i32,
    pub gid: u32,
    pub set_size: i32,
    pub size: u64,
    pub set_atime: i32,
    pub atime_sec: u64,
    pub atime_nsec: u32,
    pub set_mtime: i32,
    pub mtime_sec: u64,
    pub mtime_nsec: u32,
}

// ---- results as Rust sees them ----

struct Failure {
    errno: i32,
    message: String,
}

#[derive(Default)]
struct Outcome {
    attr: Option<Attr>,
    fh: Bytes,
    data: Bytes,
    eof: bool,
    count: u64,
    entries: Vec<nfs_rs::ReaddirplusEntry>,
    fsstat: Option<nfs_rs::FSStat>,
}

type OpResult = Result<Outcome, Failure>;

fn to_c_attr(a: &Attr) -> SpokeNfs4Attr {
    SpokeNfs4Attr {
        type_: a.type_,
        mode: a.file_mode,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev_major: a.spec_data[0],
        rdev_minor: a.spec_data[1],
        size: a.filesize,
        used: a.used,
        fsid: a.fsid,
        fileid: a.fileid,
        atime_sec: a.atime.seconds as u64,
        atime_nsec: a.atime.nseconds,
        mtime_sec: a.mtime.seconds as u64,
        mtime_nsec: a.mtime.nseconds,
        ctime_sec: a.ctime.seconds as u64,
        ctime_nsec: a.ctime.nseconds,
    }
}

struct Callback {
    done: SpokeNfs4Done,
    ctx: *mut c_void,
}
// The C caller promises `ctx` may be used from the runtime's threads.
unsafe impl Send for Callback {}

impl Callback {
    fn answer(self, result: OpResult) {
        let empty = CString::default();
        match result {
            Err(f) => {
                let message = CString::new(f.message.replace('\0', " ")).unwrap_or_default();
                let reply = SpokeNfs4Reply {
                    error: if f.errno == 0 { libc_eio() } else { f.errno },
                    message: message.as_ptr(),
                    ..blank_reply(&empty)
                };
                (self.done)(self.ctx, &reply);
            }
            Ok(o) => {
                let names: Vec<CString> = o
                    .entries
                    .iter()
                    .map(|e| CString::new(e.file_name.replace('\0', " ")).unwrap_or_default())
                    .collect();
                let entries: Vec<SpokeNfs4Entry> = o
                    .entries
                    .iter()
                    .zip(names.iter())
                    .map(|(e, name)| SpokeNfs4Entry {
                        name: name.as_ptr(),
                        has_attr: e.attr.is_some() as i32,
                        attr: e.attr.as_ref().map(to_c_attr).unwrap_or_default(),
                        fh: e.handle.as_ptr(),
                        fh_len: e.handle.len(),
                    })
                    .collect();
                let mut reply = blank_reply(&empty);
                if let Some(a) = &o.attr {
                    reply.has_attr = 1;
                    reply.attr = to_c_attr(a);
                }
                reply.fh = o.fh.as_ptr();
                reply.fh_len = o.fh.len();
                reply.data = o.data.as_ptr();
                reply.data_len = o.data.len();
                reply.eof = o.eof as i32;
                reply.count = o.count;
                reply.entries = entries.as_ptr();
                reply.entry_count = entries.len();
                if let Some(s) = &o.fsstat {
                    reply.total_bytes = s.tbytes;
                    reply.free_bytes = s.fbytes;
                    reply.avail_bytes = s.abytes;
                    reply.total_files = s.tfiles;
                    reply.free_files = s.ffiles;
                }
                (self.done)(self.ctx, &reply);
            }
        }
    }
}

fn blank_reply(empty: &CString) -> SpokeNfs4Reply {
    SpokeNfs4Reply {
        error: 0,
        message: empty.as_ptr(),
        has_attr: 0,
        attr: SpokeNfs4Attr::default(),
        fh: std::ptr::null(),
        fh_len: 0,
        data: std::ptr::null(),
        data_len: 0,
        eof: 0,
        count: 0,
        entries: std::ptr::null(),
        entry_count: 0,
        total_bytes: 0,
        free_bytes: 0,
        avail_bytes: 0,
        total_files: 0,
        free_files: 0,
    }
}

const EPERM: i32 = 1;
const ENOENT: i32 = 2;
const EIO: i32 = 5;
const ENXIO: i32 = 6;
const EACCES: i32 = 13;
const EEXIST: i32 = 17;
const EXDEV: i32 = 18;
const ENOTDIR: i32 = 20;
const EISDIR: i32 = 21;
const EINVAL: i32 = 22;
const EFBIG: i32 = 27;
const ENOSPC: i32 = 28;
const EROFS: i32 = 30;
const EMLINK: i32 = 31;
const ENAMETOOLONG: i32 = 36;
const ENOTEMPTY: i32 = 39;
const ENOTSUP: i32 = 95;
const ECONNRESET: i32 = 104;
const ETIMEDOUT: i32 = 110;
const EHOSTUNREACH: i32 = 113;
const ESTALE: i32 = 116;
const EDQUOT: i32 = 122;

fn libc_eio() -> i32 {
    EIO
}

/// The hub's answer as an errno; None when the failure is the connection's or the session's
/// (the client mounts again).
fn hub_errno(e: &NfsError) -> Option<i32> {
    use Nfs4ErrorCode as C;
    match e {
        NfsError::Nfs4(code) => Some(match code {
            C::NFS4ERR_PERM => EPERM,
            C::NFS4ERR_NOENT => ENOENT,
            C::NFS4ERR_IO => EIO,
            C::NFS4ERR_NXIO => ENXIO,
            C::NFS4ERR_ACCESS => EACCES,
            C::NFS4ERR_EXIST => EEXIST,
            C::NFS4ERR_XDEV => EXDEV,
            C::NFS4ERR_NOTDIR => ENOTDIR,
            C::NFS4ERR_ISDIR => EISDIR,
            C::NFS4ERR_INVAL => EINVAL,
            C::NFS4ERR_FBIG => EFBIG,
            C::NFS4ERR_NOSPC => ENOSPC,
            C::NFS4ERR_ROFS => EROFS,
            C::NFS4ERR_MLINK => EMLINK,
            C::NFS4ERR_NAMETOOLONG => ENAMETOOLONG,
            C::NFS4ERR_NOTEMPTY => ENOTEMPTY,
            C::NFS4ERR_DQUOT => EDQUOT,
            C::NFS4ERR_STALE | C::NFS4ERR_FHEXPIRED => ESTALE,
            C::NFS4ERR_NOTSUPP => ENOTSUP,
            // The session, client id or lease is gone (hub restart, expiry): mount again.
            C::NFS4ERR_BADSESSION
            | C::NFS4ERR_DEADSESSION
            | C::NFS4ERR_STALE_CLIENTID
            | C::NFS4ERR_EXPIRED
            | C::NFS4ERR_CONN_NOT_BOUND_TO_SESSION
            | C::NFS4ERR_STALE_STATEID
            | C::NFS4ERR_BAD_STATEID
            | C::NFS4ERR_GRACE
            | C::NFS4ERR_DELAY => return None,
            _ => EIO,
        }),
        NfsError::Nfs3(_) => Some(EIO),
        NfsError::InvalidInput(_) => Some(EINVAL),
        NfsError::Unsupported(_) => Some(ENOTSUP),
        NfsError::ModeViolation(_) => Some(EACCES),
        NfsError::RdattrError(_) => Some(EIO),
        // Refused or undecodable before or after the wire, not a broken connection.
        NfsError::Rpc(_) | NfsError::Xdr(_) => Some(EIO),
        _ => None,
    }
}

// ---- the client ----

pub struct Client {
    url: String,
    deadline: Duration,
    // None until the first mount succeeds (a client made while the hub is down).
    mount: Mutex<Option<Arc<dyn Mount>>>,
    generation: AtomicU64,
    remounting: AtomicBool,
    remount_done: tokio::sync::Notify,
    last_mount_error: Mutex<String>,
    closed: AtomicBool,
}

async fn mount_url(url: &str, deadline: Duration) -> Result<Arc<dyn Mount>, Failure> {
    match tokio::time::timeout(deadline, nfs_rs::parse_url_and_mount(url)).await {
        Ok(Ok(m)) => Ok(Arc::from(m)),
        Ok(Err(e)) => Err(Failure {
            errno: hub_errno(&e).unwrap_or(EHOSTUNREACH),
            message: format!("mount {}: {}", redact(url), e),
        }),
        Err(_) => Err(Failure {
            errno: ETIMEDOUT,
            message: format!("mount {}: no answer within {} ms", redact(url), deadline.as_millis()),
        }),
    }
}

fn redact(url: &str) -> &str {
    url.split('?').next().unwrap_or(url)
}

impl Client {
    fn current(&self) -> (Option<Arc<dyn Mount>>, u64) {
        let m = self.mount.lock().unwrap().clone();
        (m, self.generation.load(Ordering::Acquire))
    }

    /// The mount of `generation` failed for its connection or session: mount again, once for
    /// all the calls that saw it fail. Returns when a newer mount is in place or `until`.
    async fn recover(self: &Arc<Self>, generation: u64, until: Instant) {
        if self.generation.load(Ordering::Acquire) != generation {
            return; // someone already replaced it
        }
        let notified = self.remount_done.notified();
        if !self.remounting.swap(true, Ordering::AcqRel) {
            let me = self.clone();
            runtime().spawn(async move {
                let mut pause = Duration::from_millis(100);
                while !me.closed.load(Ordering::Acquire) {
                    match mount_url(&me.url, me.deadline).await {
                        Ok(m) => {
                            let old = me.mount.lock().unwrap().replace(m);
                            me.generation.fetch_add(1, Ordering::AcqRel);
                            me.last_mount_error.lock().unwrap().clear();
                            // The old client's umount may wait on a dead hub: in the background.
                            if let Some(old) = old {
                                runtime().spawn(async move {
                                    let _ = tokio::time::timeout(Duration::from_secs(5), old.umount()).await;
                                });
                            }
                            break;
                        }
                        Err(f) => {
                            *me.last_mount_error.lock().unwrap() = f.message;
                            tokio::time::sleep(pause).await;
                            pause = (pause * 2).min(Duration::from_secs(2));
                        }
                    }
                }
                me.remounting.store(false, Ordering::Release);
                me.remount_done.notify_waiters();
            });
        }
        let _ = tokio::time::timeout_at(until.into(), notified).await;
    }

    /// Runs `op` on the current mount within the deadline; a connection or session failure
    /// mounts again and, when `idempotent`, sends `op` once more on the new mount.
    async fn call<F, Fut>(self: Arc<Self>, what: String, idempotent: bool, op: F) -> OpResult
    where
        F: Fn(Arc<dyn Mount>) -> Fut,
        Fut: std::future::Future<Output = Result<Outcome, NfsError>>,
    {
        let until = Instant::now() + self.deadline;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (mount, generation) = self.current();
            let Some(mount) = mount else {
                // Not mounted yet (or any more): wait for the mount within the deadline.
                self.recover(generation, until).await;
                if self.current().0.is_none() {
                    let why = self.last_mount_error.lock().unwrap().clone();
                    return Err(Failure {
                        errno: ETIMEDOUT,
                        message: format!(
                            "{what}: the hub was not mounted within {} ms{}",
                            self.deadline.as_millis(),
                            if why.is_empty() { String::new() } else { format!(" ({why})") }
                        ),
                    });
                }
                continue;
            };
            let left = until.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, op(mount)).await {
                Ok(Ok(o)) => return Ok(o),
                Ok(Err(e)) => {
                    if let Some(errno) = hub_errno(&e) {
                        return Err(Failure { errno, message: format!("{what}: {e}") });
                    }
                    self.recover(generation, until).await;
                    if !idempotent || attempt >= 2 || Instant::now() >= until {
                        return Err(Failure {
                            errno: ECONNRESET,
                            message: format!("{what}: the hub connection failed ({e}); reconnecting"),
                        });
                    }
                }
                Err(_) => {
                    // No answer at all: this connection may be dead without having said so.
                    let me = self.clone();
                    runtime().spawn(async move {
                        let later = Instant::now() + me.deadline;
                        me.recover(generation, later).await;
                    });
                    return Err(Failure {
                        errno: ETIMEDOUT,
                        message: format!(
                            "{what}: no answer from the hub within {} ms",
                            self.deadline.as_millis()
                        ),
                    });
                }
            }
        }
    }
}

fn spawn_call<F, Fut>(client: &Arc<Client>, what: String, idempotent: bool, cb: Callback, op: F)
where
    F: Fn(Arc<dyn Mount>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<Outcome, NfsError>> + Send + 'static,
{
    let client = client.clone();
    runtime().spawn(async move {
        let result = client.call(what, idempotent, op).await;
        cb.answer(result);
    });
}

// ---- reads and writes larger than the session allows in one call ----

/// `count` bytes at `offset` in READs of the mount's size, all in flight at once; short only
/// at the end of the file.
async fn read_range(m: &Arc<dyn Mount>, fh: &Bytes, offset: u64, count: u32) -> Result<Bytes, NfsError> {
    let step = m.get_max_read_size().max(4096);
    if count <= step {
        return m.read(fh.clone(), offset, count).await;
    }
    let chunks = (0..count).step_by(step as usize).map(|at| {
        let n = step.min(count - at);
        m.read(fh.clone(), offset + at as u64, n)
    });
    let parts = futures::future::try_join_all(chunks).await?;
    let mut out = bytes::BytesMut::with_capacity(count as usize);
    for (i, part) in parts.iter().enumerate() {
        out.extend_from_slice(part);
        let wanted = step.min(count - i as u32 * step) as usize;
        if part.len() < wanted {
            break; // the file ends here
        }
    }
    Ok(out.freeze())
}

/// `data` at `offset` in WRITEs of the mount's size, all in flight at once; each chunk's
/// short writes are continued.
async fn write_range(
    m: &Arc<dyn Mount>,
    fh: &Bytes,
    offset: u64,
    data: &Bytes,
) -> Result<Vec<nfs_rs::WriteOutcome>, NfsError> {
    let step = m.get_max_write_size().max(4096) as usize;
    let chunks = (0..data.len()).step_by(step).map(|at| {
        let chunk = data.slice(at..(at + step).min(data.len()));
        async move {
            let mut outcomes = Vec::new();
            let mut done = 0usize;
            while done < chunk.len() {
                let w = m.write(fh.clone(), offset + (at + done) as u64, chunk.slice(done..)).await?;
                if w.count == 0 {
                    return Err(NfsError::Nfs4(Nfs4ErrorCode::NFS4ERR_IO));
                }
                done += w.count as usize;
                outcomes.push(w);
            }
            Ok::<_, NfsError>(outcomes)
        }
    });
    Ok(futures::future::try_join_all(chunks).await?.into_iter().flatten().collect())
}

// ---- paths ----

/// The most LOOKUPs sent in one COMPOUND: hubs bound a session's operations per COMPOUND
/// (nfs-ganesha: 16, with SEQUENCE, PUTFH, GETFH and GETATTR around them).
const LOOKUPS_PER_COMPOUND: usize = 8;

fn components(path: &str) -> Vec<&str> {
    path.split('/').filter(|c| !c.is_empty() && *c != ".").collect()
}

/// The handle (and attributes) of `path` below the mount's root: one COMPOUND for paths of up
/// to LOOKUPS_PER_COMPOUND components, one more round trip per component beyond.
async fn resolve(m: &Arc<dyn Mount>, path: &str) -> Result<nfs_rs::ObjRes, NfsError> {
    let parts = components(path);
    if parts.is_empty() {
        return Ok(nfs_rs::ObjRes { fh: m.getfh().await, attr: None });
    }
    let head = parts.len().min(LOOKUPS_PER_COMPOUND);
    let mut at = m.lookup_path(&parts[..head].join("/")).await?;
    for name in &parts[head..] {
        at = m.lookup(at.fh, name).await?;
    }
    Ok(at)
}

/// The handle of the directory holding `path`, and the last name.
async fn resolve_parent(m: &Arc<dyn Mount>, path: &str) -> Result<(Bytes, String), NfsError> {
    let (dir, name) = split_parent(path);
    Ok((resolve(m, &dir).await?.fh, name))
}

// ---- helpers for C arguments ----

unsafe fn c_str(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

unsafe fn c_bytes(p: *const u8, len: usize) -> Bytes {
    if p.is_null() || len == 0 {
        return Bytes::new();
    }
    Bytes::copy_from_slice(unsafe { std::slice::from_raw_parts(p, len) })
}

fn split_parent(path: &str) -> (String, String) {
    match path.rfind('/') {
        Some(i) => (path[..i].to_string(), path[i + 1..].to_string()),
        None => (String::new(), path.to_string()),
    }
}

fn nfs_time(sec: u64, nsec: u32) -> Time {
    Time { seconds: sec.min(u32::MAX as u64) as u32, nseconds: nsec }
}

unsafe fn client_of<'a>(c: *const Client) -> &'a Arc<Client> {
    // `c` is a Box<Arc<Client>> handed out by spoke_nfs4_connect.
    unsafe { &*(c as *const Arc<Client>) }
}

// ---- the C interface ----

/// Mounts `url` (nfs://host[:port]/path?version=4.1&uid=U&gid=G&nfsport=P&noresvport=true).
/// `wait`: blocks for at most `deadline_ms`, null on failure with the reason in `error`;
/// otherwise returns at once and mounts in the background (calls wait for it within their
/// deadline).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn spoke_nfs4_connect(
    url: *const c_char,
    deadline_ms: u32,
    wait: i32,
    error: *mut c_char,
    error_len: usize,
) -> *mut Client {
    let url = unsafe { c_str(url) };
    let deadline = Duration::from_millis(deadline_ms.max(100) as u64);
    let new_client = |mount: Option<Arc<dyn Mount>>, url: String| {
        let client = Arc::new(Client {
            url,
            deadline,
            mount: Mutex::new(mount),
            generation: AtomicU64::new(0),
            remounting: AtomicBool::new(false),
            remount_done: tokio::sync::Notify::new(),
            last_mount_error: Mutex::new(String::new()),
            closed: AtomicBool::new(false),
        });
        Box::into_raw(Box::new(client)) as *mut Client
    };
    if wait == 0 {
        // Mounted by the first call (or in the background from now): calls fail within the
        // deadline while the hub does not answer.
        let c = new_client(None, url);
        let client = unsafe { client_of(c) }.clone();
        runtime().spawn(async move { client.recover(0, Instant::now()).await });
        return c;
    }
    let result = runtime().block_on(mount_url(&url, deadline));
    match result {
        Ok(m) => new_client(Some(m), url),
        Err(f) => {
            if !error.is_null() && error_len > 0 {
                let bytes = f.message.as_bytes();
                let n = bytes.len().min(error_len - 1);
                unsafe {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), error as *mut u8, n);
                    *error.add(n) = 0;
                }
            }
            std::ptr::null_mut()
        }
    }
}

/// Unmounts (bounded by the deadline) and frees the client. Calls still running answer with
/// an error; their callbacks may run after this returns, so callers wait for theirs first.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn spoke_nfs4_free(c: *mut Client) {
    if c.is_null() {
        return;
    }
    let client = unsafe { Box::from_raw(c as *mut Arc<Client>) };
    client.closed.store(true, Ordering::Release);
    let (mount, _) = client.current();
    let deadline = client.deadline;
    if let Some(mount) = mount {
        let umount = async move {
            let _ = tokio::time::timeout(deadline, mount.umount()).await;
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            // Freed from a callback (on the library's own thread): cannot block here.
            runtime().spawn(umount);
        } else {
            runtime().block_on(umount);
        }
    }
}

/// LOOKUP of a path relative to the export ("" is its root): handle and attributes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn spoke_nfs4_lookup(
    c: *const Client,
    path: *const c_char,
    done: SpokeNfs4Done,
    ctx: *mut c_void,
) {
    let client = unsafe { client_of(c) };
    let path = unsafe { c_str(path) };
    let what = format!("lookup {path:?}");
    spawn_call(client, what, true, Callback { done, ctx }, move |m| {
        let path = path.clone();
        async move {
            let r = resolve(&m, &path).await?;
            let attr = match r.attr {
                Some(a) => a,
                None => m.getattr(r.fh.clone()).await?,
            };
            Ok(Outcome { attr: Some(attr), fh: r.fh, ..Default::default() })
        }
    });
}

/// GETATTR by handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn spoke_nfs4_getattr(
    c: *const Client,
    fh: *const u8,
    fh_len: usize,
    done: SpokeNfs4Done,
    ctx: *mut c_void,
) {
    let client = unsafe { client_of(c) };
    let fh = unsafe { c_bytes(fh, fh_len) };
    spawn_call(client, "getattr".into(), true, Callback { done, ctx }, move |m| {
        let fh = fh.clone();
        async move {
            let attr = m.getattr(fh.clone()).await?;
            Ok(Outcome { attr: Some(attr), fh, ..Default::default() })
        }
    });
}

/// The whole listing of a directory (by path), entries with handles and attributes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn spoke_nfs4_readdir(
    c: *const Client,
    path: *const c_char,
    done: SpokeNfs4Done,
    ctx: *mut c_void,
) {
    let client = unsafe { client_of(c) };
    let path = unsafe { c_str(path) };
    let what = format!("readdir {path:?}");
    spawn_call(client, what, true, Callback { done, ctx }, move |m| {
        let path = path.clone();
        async move {
            let dir = resolve(&m, &path).await?.fh;
            let mut entries = Vec::new();
            let mut position = DirectoryCookie::default();
            loop {
                let page = m.readdirplus_page(dir.clone(), position).await?;
                entries.extend(
                    page.entries.into_iter().filter(|e| e.file_name != "." && e.file_name != ".."),
                );
                if page.eof {
                    break;
                }
                position = page.next;
            }
            Ok(Outcome { entries, ..Default::default() })
        }
    });
}

/// READ by handle, with the file's attributes fetched beside it when `with_attr`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn spoke_nfs4_read(
    c: *const Client,
    fh: *const u8,
    fh_len: usize,
    offset: u64,
    count: u32,
    with_attr: i32,
    done: SpokeNfs4Done,
    ctx: *mut c_void,
) {
    let client = unsafe { client_of(c) };
    let fh = unsafe { c_bytes(fh, fh_len) };
    let what = format!("read {count} bytes at {offset}");
    spawn_call(client, what, true, Callback { done, ctx }, move |m| {
        let fh = fh.clone();
        async move {
            let (data, attr) = if with_attr != 0 {
                let (d, a) = tokio::join!(read_range(&m, &fh, offset, count), m.getattr(fh.clone()));
                (d?, Some(a?))
            } else {
                (read_range(&m, &fh, offset, count).await?, None)
            };
            let eof = attr.as_ref().is_some_and(|a| offset + data.len() as u64 >= a.filesize);
            Ok(Outcome { data, attr, eof, ..Default::default() })
        }
    });
}

/// WRITE by handle, then COMMIT: the hub has the bytes stably when the callback says so.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn spoke_nfs4_write(
    c: *const Client,
    fh: *const u8,
    fh_len: usize,
    offset: u64,
    data: *const u8,
    len: usize,
    done: SpokeNfs4Done,
    ctx: *mut c_void,
) {
    let client = unsafe { client_of(c) };
    let fh = unsafe { c_bytes(fh, fh_len) };
    let data = unsafe { c_bytes(data, len) };
    let what = format!("write {len} bytes at {offset}");
    // Writing the same bytes at the same offset again is harmless: idempotent.
    spawn_call(client, what, true, Callback { done, ctx }, move |m| {
        let fh = fh.clone();
        let data = data.clone();
        async move {
            let outcomes = write_range(&m, &fh, offset, &data).await?;
            m.commit_write_batch(fh.clone(), offset, data.len() as u32, &outcomes).await?;
            Ok(Outcome { count: data.len() as u64, ..Default::default() })
        }
    });
}

/// COMMIT of the whole file (fsync).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn spoke_nfs4_commit(
    c: *const Client,
    fh: *const u8,
    fh_len: usize,
    done: SpokeNfs4Done,
    ctx: *mut c_void,
) {
    let client = unsafe { client_of(c) };
    let fh = unsafe { c_bytes(fh, fh_len) };
    spawn_call(client, "commit".into(), true, Callback { done, ctx }, move |m| {
        let fh = fh.clone();
        async move {
            m.commit(fh, 0, 0).await?;
            Ok(Outcome::default())
        }
    });
}

/// Creates a regular file (`exclusive`: fails with EEXIST when the name exists).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn spoke_nfs4_create(
    c: *const Client,
    path: *const c_char,
    mode: u32,
    exclusive: i32,
    done: SpokeNfs4Done,
    ctx: *mut c_void,
) {
    let client = unsafe { client_of(c) };
    let path = unsafe { c_str(path) };
    let what = format!("create {path:?}");
    spawn_call(client, what, false, Callback { done, ctx }, move |m| {
        let path = path.clone();
        async move {
            let (dir, name) = resolve_parent(&m, &path).await?;
            if exclusive != 0 {
                match m.lookup(dir.clone(), &name).await {
                    Ok(_) => return Err(NfsError::Nfs4(Nfs4ErrorCode::NFS4ERR_EXIST)),
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e),
                }
            }
            let r = m.create(dir, &name, Some(mode & 0o7777)).await?;
            m.close(r.fh.clone()).await.ok();
            let attr = match r.attr {
                Some(a) => a,
                None => m.getattr(r.fh.clone()).await?,
            };
            Ok(Outcome { attr: Some(attr), fh: r.fh, ..Default::default() })
        }
    });
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn spoke_nfs4_mkdir(
    c: *const Client,
    path: *const c_char,
    mode: u32,
    done: SpokeNfs4Done,
    ctx: *mut c_void,
) {
    let client = unsafe { client_of(c) };
    let path = unsafe { c_str(path) };
    let what = format!("mkdir {path:?}");
    spawn_call(client, what, false, Callback { done, ctx }, move |m| {
        let path = path.clone();
        async move {
            let (dir, name) = resolve_parent(&m, &path).await?;
            let r = m.mkdir(dir, &name, mode & 0o7777).await?;
            let attr = match r.attr {
                Some(a) => a,
                None => m.getattr(r.fh.clone()).await?,
            };
            Ok(Outcome { attr: Some(attr), fh: r.fh, ..Default::default() })
        }
    });
}

/// REMOVE of a file (`directory` 0) or an empty directory (1).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn spoke_nfs4_remove(
    c: *const Client,
    path: *const c_char,
    directory: i32,
    done: SpokeNfs4Done,
    ctx: *mut c_void,
) {
    let client = unsafe { client_of(c) };
    let path = unsafe { c_str(path) };
    let what = format!("remove {path:?}");
    spawn_call(client, what, false, Callback { done, ctx }, move |m| {
        let path = path.clone();
        async move {
            let (dir, name) = resolve_parent(&m, &path).await?;
            if directory != 0 {
                m.rmdir(dir, &name).await?;
            } else {
                m.remove(dir, &name).await?;
            }
            Ok(Outcome::default())
        }
    });
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn spoke_nfs4_rename(
    c: *const Client,
    from: *const c_char,
    to: *const c_char,
    done: SpokeNfs4Done,
    ctx: *mut c_void,
) {
    let client = unsafe { client_of(c) };
    let from = unsafe { c_str(from) };
    let to = unsafe { c_str(to) };
    let what = format!("rename {from:?} to {to:?}");
    spawn_call(client, what, false, Callback { done, ctx }, move |m| {
        let (from, to) = (from.clone(), to.clone());
        async move {
            let (fd, from_name) = resolve_parent(&m, &from).await?;
            let (td, to_name) = resolve_parent(&m, &to).await?;
            m.rename(fd, &from_name, td, &to_name).await?;
            Ok(Outcome::default())
        }
    });
}

/// SETATTR by handle (chmod, chown, truncate, utimens), then the attributes after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn spoke_nfs4_setattr(
    c: *const Client,
    fh: *const u8,
    fh_len: usize,
    request: *const SpokeNfs4SetAttr,
    done: SpokeNfs4Done,
    ctx: *mut c_void,
) {
    let client = unsafe { client_of(c) };
    let fh = unsafe { c_bytes(fh, fh_len) };
    let r = unsafe { &*request };
    let mode = (r.set_mode != 0).then_some(r.mode & 0o7777);
    let uid = (r.set_uid != 0).then_some(r.uid);
    let gid = (r.set_gid != 0).then_some(r.gid);
    let size = (r.set_size != 0).then_some(r.size);
    let atime = (r.set_atime != 0).then_some((r.atime_sec, r.atime_nsec));
    let mtime = (r.set_mtime != 0).then_some((r.mtime_sec, r.mtime_nsec));
    spawn_call(client, "setattr".into(), true, Callback { done, ctx }, move |m| {
        let fh = fh.clone();
        async move {
            m.setattr(
                fh.clone(),
                None,
                mode,
                uid,
                gid,
                size,
                atime.map(|(s, n)| nfs_time(s, n)),
                mtime.map(|(s, n)| nfs_time(s, n)),
            )
            .await?;
            let attr = m.getattr(fh.clone()).await?;
            Ok(Outcome { attr: Some(attr), fh, ..Default::default() })
        }
    });
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn spoke_nfs4_readlink(
    c: *const Client,
    fh: *const u8,
    fh_len: usize,
    done: SpokeNfs4Done,
    ctx: *mut c_void,
) {
    let client = unsafe { client_of(c) };
    let fh = unsafe { c_bytes(fh, fh_len) };
    spawn_call(client, "readlink".into(), true, Callback { done, ctx }, move |m| {
        let fh = fh.clone();
        async move {
            let target = m.readlink(fh).await?;
            Ok(Outcome { data: Bytes::from(target.into_bytes()), ..Default::default() })
        }
    });
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn spoke_nfs4_symlink(
    c: *const Client,
    target: *const c_char,
    path: *const c_char,
    done: SpokeNfs4Done,
    ctx: *mut c_void,
) {
    let client = unsafe { client_of(c) };
    let target = unsafe { c_str(target) };
    let path = unsafe { c_str(path) };
    let what = format!("symlink {path:?}");
    spawn_call(client, what, false, Callback { done, ctx }, move |m| {
        let (target, path) = (target.clone(), path.clone());
        async move {
            let (d, name) = resolve_parent(&m, &path).await?;
            let r = m.symlink(&target, d, &name).await?;
            let attr = match r.attr {
                Some(a) => a,
                None => m.getattr(r.fh.clone()).await?,
            };
            Ok(Outcome { attr: Some(attr), fh: r.fh, ..Default::default() })
        }
    });
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn spoke_nfs4_link(
    c: *const Client,
    existing: *const c_char,
    path: *const c_char,
    done: SpokeNfs4Done,
    ctx: *mut c_void,
) {
    let client = unsafe { client_of(c) };
    let existing = unsafe { c_str(existing) };
    let path = unsafe { c_str(path) };
    let what = format!("link {path:?}");
    spawn_call(client, what, false, Callback { done, ctx }, move |m| {
        let (existing, path) = (existing.clone(), path.clone());
        async move {
            let src = resolve(&m, &existing).await?.fh;
            let (d, name) = resolve_parent(&m, &path).await?;
            let attr = m.link(src, d, &name).await?;
            Ok(Outcome { attr: Some(attr), ..Default::default() })
        }
    });
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn spoke_nfs4_fsstat(c: *const Client, done: SpokeNfs4Done, ctx: *mut c_void) {
    let client = unsafe { client_of(c) };
    spawn_call(client, "fsstat".into(), true, Callback { done, ctx }, move |m| async move {
        let s = m.fsstat().await?;
        Ok(Outcome { fsstat: Some(s), ..Default::default() })
    });
}

/// How many times the client has mounted again since it connected (for metrics and tests).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn spoke_nfs4_reconnects(c: *const Client) -> u64 {
    unsafe { client_of(c) }.generation.load(Ordering::Acquire)
}
