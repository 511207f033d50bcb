/* spoke_nfs4.h: the C interface of spoke-nfs4 (cache-agent/remote/nfs4/src/lib.rs), the
 * agent's NFSv4.1 hub client. Every call but connect and free starts the work and returns;
 * `done` runs once on one of the library's I/O threads, within the client's deadline. The
 * reply and everything it points to are valid only while `done` runs. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spoke_nfs4_client spoke_nfs4_client;

typedef struct {
  uint32_t type; /* 1 file, 2 directory, 3 block, 4 char, 5 symlink, 6 socket, 7 fifo */
  uint32_t mode; /* permission bits */
  uint32_t nlink;
  uint32_t uid;
  uint32_t gid;
  uint32_t rdev_major;
  uint32_t rdev_minor;
  uint64_t size;
  uint64_t used;
  uint64_t fsid;
  uint64_t fileid;
  uint64_t atime_sec;
  uint32_t atime_nsec;
  uint64_t mtime_sec;
  uint32_t mtime_nsec;
  uint64_t ctime_sec;
  uint32_t ctime_nsec;
} spoke_nfs4_attr;

typedef struct {
  const char* name;
  int32_t has_attr;
  spoke_nfs4_attr attr;
  const uint8_t* fh;
  size_t fh_len;
} spoke_nfs4_entry;

typedef struct {
  int32_t error;       /* 0, or an errno */
  const char* message; /* why, naming the call; "" on success */
  int32_t has_attr;
  spoke_nfs4_attr attr;
  const uint8_t* fh;
  size_t fh_len;
  const uint8_t* data; /* READ bytes, or a READLINK target */
  size_t data_len;
  int32_t eof;
  uint64_t count; /* WRITE: bytes the hub took */
  const spoke_nfs4_entry* entries;
  size_t entry_count;
  uint64_t total_bytes;
  uint64_t free_bytes;
  uint64_t avail_bytes;
  uint64_t total_files;
  uint64_t free_files;
} spoke_nfs4_reply;

typedef void (*spoke_nfs4_done)(void* ctx, const spoke_nfs4_reply* reply);

typedef struct {
  int32_t set_mode;
  uint32_t mode;
  int32_t set_uid;
  uint32_t uid;
  int32_t set_gid;
  uint32_t gid;
  int32_t set_size;
  uint64_t size;
  int32_t set_atime;
  uint64_t atime_sec;
  uint32_t atime_nsec;
  int32_t set_mtime;
  uint64_t mtime_sec;
  uint32_t mtime_nsec;
} spoke_nfs4_setattr_request;

/* Mounts `url` (nfs://host[:port]/path?version=4.1&uid=U&gid=G&nfsport=P&noresvport=true).
 * `wait`: blocks at most `deadline_ms`, null on failure with the reason in `error`; 0: returns
 * at once and mounts in the background (calls wait for it within their deadline). */
spoke_nfs4_client* spoke_nfs4_connect(const char* url, uint32_t deadline_ms, int32_t wait,
                                      char* error, size_t error_len);
/* Unmounts (bounded) and frees. Wait for every call's `done` before. */
void spoke_nfs4_free(spoke_nfs4_client* c);

/* Paths are relative to the mounted directory ("" is it). */
void spoke_nfs4_lookup(const spoke_nfs4_client* c, const char* path, spoke_nfs4_done done,
                       void* ctx);
void spoke_nfs4_getattr(const spoke_nfs4_client* c, const uint8_t* fh, size_t fh_len,
                        spoke_nfs4_done done, void* ctx);
void spoke_nfs4_readdir(const spoke_nfs4_client* c, const char* path, spoke_nfs4_done done,
                        void* ctx);
void spoke_nfs4_read(const spoke_nfs4_client* c, const uint8_t* fh, size_t fh_len, uint64_t offset,
                     uint32_t count, int32_t with_attr, spoke_nfs4_done done, void* ctx);
/* WRITE then COMMIT: stable on the hub when `done` reports the count. */
void spoke_nfs4_write(const spoke_nfs4_client* c, const uint8_t* fh, size_t fh_len, uint64_t offset,
                      const uint8_t* data, size_t len, spoke_nfs4_done done, void* ctx);
void spoke_nfs4_commit(const spoke_nfs4_client* c, const uint8_t* fh, size_t fh_len,
                       spoke_nfs4_done done, void* ctx);
void spoke_nfs4_create(const spoke_nfs4_client* c, const char* path, uint32_t mode,
                       int32_t exclusive, spoke_nfs4_done done, void* ctx);
void spoke_nfs4_mkdir(const spoke_nfs4_client* c, const char* path, uint32_t mode,
                      spoke_nfs4_done done, void* ctx);
void spoke_nfs4_remove(const spoke_nfs4_client* c, const char* path, int32_t directory,
                       spoke_nfs4_done done, void* ctx);
void spoke_nfs4_rename(const spoke_nfs4_client* c, const char* from, const char* to,
                       spoke_nfs4_done done, void* ctx);
void spoke_nfs4_setattr(const spoke_nfs4_client* c, const uint8_t* fh, size_t fh_len,
                        const spoke_nfs4_setattr_request* request, spoke_nfs4_done done, void* ctx);
void spoke_nfs4_readlink(const spoke_nfs4_client* c, const uint8_t* fh, size_t fh_len,
                         spoke_nfs4_done done, void* ctx);
void spoke_nfs4_symlink(const spoke_nfs4_client* c, const char* target, const char* path,
                        spoke_nfs4_done done, void* ctx);
void spoke_nfs4_link(const spoke_nfs4_client* c, const char* existing, const char* path,
                     spoke_nfs4_done done, void* ctx);
void spoke_nfs4_fsstat(const spoke_nfs4_client* c, spoke_nfs4_done done, void* ctx);
/* Times the client mounted again after a connection or session failure. */
uint64_t spoke_nfs4_reconnects(const spoke_nfs4_client* c);

#ifdef __cplusplus
}
#endif
