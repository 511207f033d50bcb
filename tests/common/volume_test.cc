// common/volume.h: StorageClass parameters, subDir templates, volume id and context.
#include "common/volume.h"

#include <gtest/gtest.h>

#include <tuple>
#include <vector>

namespace spoke {
namespace {

StringMap Base() { return {{"server", "10.0.0.1"}, {"share", "/srv/export"}, {"mode", "scratch"}}; }

// Expects ParseVolumeParams to reject `params` with a message naming `param`.
void ExpectRejected(const StringMap& params, const std::string& param) {
  auto p = ParseVolumeParams(params);
  ASSERT_FALSE(p) << "accepted a bad " << param;
  EXPECT_EQ(p.error().code(), Code::kInvalidArgument);
  EXPECT_NE(p.error().message().find(param), std::string::npos) << p.error().message();
}

TEST(VolumeParamsTest, DefaultsPerMode) {
  auto s = ParseVolumeParams(Base());
  ASSERT_TRUE(s) << s.error().message();
  EXPECT_EQ(s->mode, VolumeMode::kScratch);
  EXPECT_EQ(s->on_delete, OnDelete::kDelete);
  EXPECT_EQ(s->sub_dir, "${pv.metadata.name}");
  EXPECT_EQ(s->cache.consistency, Consistency::kStrict);
  EXPECT_EQ(s->hub.nfs_port, 2049);
  EXPECT_EQ(s->hub.mount_port, 0);
  auto d = ParseVolumeParams(
      {{"server", "hub"}, {"share", "/d"}, {"mode", "dataset"}, {"subDir", "imagenet/train"}});
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_EQ(d->on_delete, OnDelete::kRetain);
  EXPECT_EQ(d->cache.consistency, Consistency::kImmutable);
  EXPECT_EQ(d->sub_dir, "imagenet/train");
}

TEST(VolumeParamsTest, EachBadParameterNamesItself) {
  auto with = [](std::string k, std::string v) {
    StringMap m = Base();
    m[k] = v;
    return m;
  };
  ExpectRejected(with("server", ""), "server");
  ExpectRejected(with("server", "a/b"), "server");
  ExpectRejected(with("server", "a|b"), "server");
  ExpectRejected(with("share", ""), "share");
  ExpectRejected(with("share", "srv/export"), "share");
  ExpectRejected(with("share", "/srv/../etc"), "share");
  ExpectRejected(with("share", "/srv//export"), "share");
  ExpectRejected(with("share", "/srv/export/"), "share");
  ExpectRejected(with("nfsPort", "0"), "nfsPort");
  ExpectRejected(with("nfsPort", "65536"), "nfsPort");
  ExpectRejected(with("nfsPort", "20x"), "nfsPort");
  ExpectRejected(with("mountPort", "-1"), "mountPort");
  ExpectRejected(with("mode", "rw"), "mode");
  ExpectRejected(with("onDelete", "shred"), "onDelete");
  ExpectRejected(with("consistency", "eventual"), "consistency");
  ExpectRejected(with("consistency", "immutable"), "consistency");  // scratch is written
  ExpectRejected(with("ttlSeconds", "0"), "ttlSeconds");
  ExpectRejected(with("prefetch", "always"), "prefetch");
  ExpectRejected(with("hubTimeoutSeconds", "0"), "hubTimeoutSeconds");
  ExpectRejected(with("hubTimeoutSeconds", "601"), "hubTimeoutSeconds");
  ExpectRejected(with("subDir", "../x"), "subDir");
  ExpectRejected(with("subDir", "/abs"), "subDir");
  ExpectRejected(with("subDir", "${unknown}"), "subDir");
  ExpectRejected(with("subDir", "${pv.metadata.name"), "subDir");
  ExpectRejected(with("subDir", "a/./b"), "subDir");
  ExpectRejected(with("subDir", "a\\b"), "subDir");
  ExpectRejected(with("subDir", "a|b/${pv.metadata.name}"), "subDir");
  ExpectRejected(with("serverr", "typo"), "serverr");
  StringMap ds = {{"server", "h"}, {"share", "/d"}, {"mode", "dataset"}};
  ds["onDelete"] = "delete";
  ExpectRejected(ds, "onDelete");
  ds.erase("onDelete");
  ds["subDir"] = "${pvc.metadata.name}";
  ExpectRejected(ds, "subDir");
  ds["subDir"] = "../../etc";
  ExpectRejected(ds, "subDir");
}

// A refusal says what was given and what would be accepted, not only which parameter.
TEST(VolumeParamsTest, RefusalsSayTheValueAndWhatIsAccepted) {
  auto error_of = [](std::string k, std::string v) {
    StringMap m = {{"server", "hub"}, {"share", "/srv/export"}};
    m[k] = v;
    auto p = ParseVolumeParams(m);
    EXPECT_FALSE(p) << k << "=" << v;
    return p ? std::string() : p.error().message();
  };
  const std::tuple<std::string, std::string, std::vector<std::string>> cases[] = {
      {"nfsPort", "20x", {"parameter nfsPort", "1..65535", "'20x'"}},
      {"ttlSeconds", "30s", {"parameter ttlSeconds", "1..86400", "'30s'"}},
      {"hubTimeoutSeconds", "601", {"parameter hubTimeoutSeconds", "1..600", "601"}},
      {"hubUid", "-1", {"parameter hubUid", "0..4294967294", "-1"}},
      {"mode", "rw", {"parameter mode", "dataset | scratch", "'rw'"}},
      {"prefetch", "always", {"parameter prefetch", "off | readahead | auto", "'always'"}},
      {"allowRoot", "yes", {"parameter allowRoot", "true | false", "'yes'"}},
      {"writeMode", "async", {"parameter writeMode", "sync | writeback", "'async'"}},
      {"server", std::string(254, 'h'), {"parameter server", "at most 253", "254"}},
      {"subDir", "my dir", {"parameter subDir", "space", "'my dir'"}},
      {"subDir", "a?b", {"parameter subDir", "'?'", "? & = # %"}},
      {"share", "srv", {"parameter share", "absolute", "'srv'"}},
      {"serverr", "x", {"unknown StorageClass parameter 'serverr'", "known: server"}},
  };
  for (const auto& [k, v, parts] : cases) {
    std::string err = error_of(k, v);
    for (const std::string& part : parts) {
      EXPECT_NE(err.find(part), std::string::npos) << k << "=" << v << ": " << err;
    }
  }
}

TEST(VolumeParamsTest, WriteModeDefaultsToWriteBackAndReachesTheContext) {
  auto p = ParseVolumeParams(Base());
  ASSERT_TRUE(p);
  EXPECT_EQ(p->write_mode, WriteMode::kWriteBack);
  StringMap m = Base();
  m["writeMode"] = "sync";
  p = ParseVolumeParams(m);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->write_mode, WriteMode::kSync);
  auto ctx = MakeVolumeContext(*p, "pv-1");
  EXPECT_EQ(ctx.ToMap().at("writeMode"), "sync");
  auto back = VolumeContext::FromMap(ctx.ToMap());
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(back->write_mode, WriteMode::kSync);
  m["writeMode"] = "unstable";
  p = ParseVolumeParams(m);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->write_mode, WriteMode::kUnstable);
  back = VolumeContext::FromMap(MakeVolumeContext(*p, "pv-2").ToMap());
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(back->write_mode, WriteMode::kUnstable);
}

TEST(VolumeParamsTest, NfsVersionChoosesTheHubProtocol) {
  auto p = ParseVolumeParams(Base());
  ASSERT_TRUE(p);
  EXPECT_EQ(p->hub.nfs_version, NfsVersion::kV3);
  EXPECT_FALSE(MakeVolumeContext(*p, "pv-1").ToMap().contains("nfsVersion"))
      << "v3 contexts stay as they were";
  StringMap m = Base();
  m["nfsVersion"] = "4.1";
  p = ParseVolumeParams(m);
  ASSERT_TRUE(p) << p.error().message();
  EXPECT_EQ(p->hub.nfs_version, NfsVersion::kV41);
  auto ctx = MakeVolumeContext(*p, "pv-1");
  EXPECT_EQ(ctx.ToMap().at("nfsVersion"), "4.1");
  auto back = VolumeContext::FromMap(ctx.ToMap());
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(back->hub.nfs_version, NfsVersion::kV41);

  m["nfsVersion"] = "4.0";
  ExpectRejected(m, "nfsVersion");
  EXPECT_NE(ParseVolumeParams(m).error().message().find("4.1"), std::string::npos);
  m["nfsVersion"] = "5";
  ExpectRejected(m, "nfsVersion");
  m["nfsVersion"] = "4.1";
  m["mountPort"] = "20048";
  ExpectRejected(m, "mountPort");

  auto url = ParseNfsUrl("nfs://fs-1.efs.us-east-2.amazonaws.com/data?version=4.1");
  ASSERT_TRUE(url) << url.error().message();
  EXPECT_EQ(url->nfs_version, NfsVersion::kV41);
  EXPECT_EQ(url->nfs_port, 2049);
  EXPECT_FALSE(ParseNfsUrl("nfs://h/data?version=4.1&mountport=20048"));
  EXPECT_FALSE(ParseNfsUrl("nfs://h/data?version=4"));
}

TEST(VolumeParamsTest, ProvisionerMetadataIsNotAnUnknownParameter) {
  StringMap m = Base();
  m["csi.storage.k8s.io/pvc/name"] = "data";
  m["csi.storage.k8s.io/pv/name"] = "pv-1";
  EXPECT_TRUE(ParseVolumeParams(m));
}

TEST(ExpandSubDirTest, ExpandsKnownVariables) {
  StringMap meta = {{"csi.storage.k8s.io/pvc/name", "data"},
                    {"csi.storage.k8s.io/pvc/namespace", "ml"},
                    {"csi.storage.k8s.io/pv/name", "pvc-123"}};
  auto e = ExpandSubDir("teams/${pvc.metadata.namespace}/${pvc.metadata.name}-${pv.metadata.name}",
                        meta, "ignored");
  ASSERT_TRUE(e) << e.error().message();
  EXPECT_EQ(*e, "teams/ml/data-pvc-123");
  // pv name falls back to the CSI volume name.
  auto f = ExpandSubDir("${pv.metadata.name}", {}, "vol-7");
  ASSERT_TRUE(f);
  EXPECT_EQ(*f, "vol-7");
}

TEST(ExpandSubDirTest, TraversalAttemptsAreRejected) {
  auto expect_bad = [](std::string_view tmpl, const StringMap& meta, std::string_view name) {
    auto e = ExpandSubDir(tmpl, meta, name);
    ASSERT_FALSE(e) << tmpl << " -> " << *e;
    EXPECT_EQ(e.error().code(), Code::kInvalidArgument);
    EXPECT_NE(e.error().message().find("subDir"), std::string::npos) << e.error().message();
  };
  expect_bad("../x", {}, "v");
  expect_bad("${pv.metadata.name}/../..", {}, "v");
  expect_bad("${pvc.metadata.name}", {{"csi.storage.k8s.io/pvc/name", "../../etc"}}, "v");
  expect_bad("${pvc.metadata.name}", {{"csi.storage.k8s.io/pvc/name", "a/b"}}, "v");
  expect_bad("${pvc.metadata.name}", {{"csi.storage.k8s.io/pvc/name", ".."}}, "v");
  expect_bad("x/${pv.metadata.name}", {}, "..");
  expect_bad("${pv.metadata.name}", {}, "a/../../b");
  expect_bad("${pvc.metadata.name}", {}, "v");  // metadata missing
  expect_bad("${pvc.metadata.uid}", {}, "v");   // unknown variable
  expect_bad("${pv.metadata.name}", {}, "");    // expands to the share root
  expect_bad("/${pv.metadata.name}", {}, "v");
}

TEST(NormalizeRelativePathTest, Rules) {
  EXPECT_EQ(*NormalizeRelativePath("", "p"), "");
  EXPECT_EQ(*NormalizeRelativePath("a/b/", "p"), "a/b");
  for (std::string bad :
       std::vector<std::string>{"/a", "a//b", "./a", "a/..", "..", "a\nb", std::string(1025, 'a'),
                                std::string(256, 'a'), std::string("a\0b", 3)}) {
    auto r = NormalizeRelativePath(bad, "thing");
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message().find("thing"), std::string::npos);
  }
}

// Paths as people type them (warm-up and evict prefixes, hints): the root and the "./",
// trailing and double slashes are forgiven; ".." and absolute paths are not.
TEST(NormalizePathInVolumeTest, ForgivesTheUsualSpellings) {
  const std::pair<std::string, std::string> ok[] = {
      {"", ""},
      {".", ""},
      {"./", ""},
      {"/", ""},
      {"//", ""},
      {"/.", ""},
      {"./.", ""},
      {"sub", "sub"},
      {"sub/", "sub"},
      {"./sub", "sub"},
      {"./sub/", "sub"},
      {"sub//x", "sub/x"},
      {"sub/./x", "sub/x"},
      {"a/b/c", "a/b/c"},
      {"...", "..."},
      {".hidden", ".hidden"},
  };
  for (const auto& [in, want] : ok) {
    auto r = NormalizePathInVolume(in, "prefix");
    ASSERT_TRUE(r) << "'" << in << "': " << r.error().message();
    EXPECT_EQ(*r, want) << "'" << in << "'";
    // What it returns is what the strict check accepts unchanged.
    EXPECT_EQ(NormalizeRelativePath(*r, "p").value_or("<refused>"), *r) << in;
  }
  const std::string bad[] = {"..",
                             "../x",
                             "a/..",
                             "a/../b",
                             "./..",
                             "/..",
                             "/etc",
                             "/a/b",
                             "//a",
                             "a\nb",
                             "a|b",
                             "a\\b",
                             std::string(1025, 'a'),
                             "a/" + std::string(256, 'b')};
  for (const std::string& in : bad) {
    auto r = NormalizePathInVolume(in, "prefix");
    ASSERT_FALSE(r) << "'" << in << "' = '" << *r << "'";
    EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
    EXPECT_NE(r.error().message().find("prefix"), std::string::npos) << r.error().message();
  }
  EXPECT_NE(NormalizePathInVolume("/etc", "p").error().message().find("whole volume"),
            std::string::npos);
  EXPECT_NE(NormalizePathInVolume("a/../b", "p").error().message().find("'..'"), std::string::npos);
}

TEST(VolumeIdTest, RoundTrip) {
  VolumeId id{HubAddress{"hub.example.com", 20491, 20492, "/srv/export"}, VolumeMode::kScratch,
              OnDelete::kArchive, "teams/ml/pvc-1"};
  std::string text = id.Encode();
  EXPECT_EQ(text, "spoke1|scratch|archive|hub.example.com|20491|20492|/srv/export|teams/ml/pvc-1");
  auto back = VolumeId::Decode(text);
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(*back, id);
  VolumeId ds{HubAddress{"10.0.0.1", 2049, 0, "/"}, VolumeMode::kDataset, OnDelete::kRetain, ""};
  auto ds_back = VolumeId::Decode(ds.Encode());
  ASSERT_TRUE(ds_back) << ds_back.error().message();
  EXPECT_EQ(*ds_back, ds);
  // NFSv4.1 volumes say so where v3 ones have the MOUNT port (v4.1 has none).
  VolumeId v41{HubAddress{"fs-1.efs.example.com", 2049, 0, "/", NfsVersion::kV41},
               VolumeMode::kScratch, OnDelete::kDelete, "pvc-2"};
  EXPECT_EQ(v41.Encode(), "spoke1|scratch|delete|fs-1.efs.example.com|2049|nfs4.1|/|pvc-2");
  auto v41_back = VolumeId::Decode(v41.Encode());
  ASSERT_TRUE(v41_back) << v41_back.error().message();
  EXPECT_EQ(*v41_back, v41);
}

TEST(VolumeIdTest, MalformedIdsAreRejected) {
  for (std::string bad : std::vector<std::string>{
           "",
           "fake-vol-id",
           "spoke1|scratch|delete|h|2049|0|/s",            // 7 fields
           "spoke1|scratch|delete|h|2049|0|/s|p|extra",    // 9 fields
           "spoke2|scratch|delete|h|2049|0|/s|p",          // version
           "spoke1|other|delete|h|2049|0|/s|p",            // mode
           "spoke1|scratch|shred|h|2049|0|/s|p",           // onDelete
           "spoke1|scratch|delete|h|0|0|/s|p",             // nfs port 0
           "spoke1|scratch|delete|h|70000|0|/s|p",         // nfs port range
           "spoke1|scratch|delete|h|x|0|/s|p",             // nfs port text
           "spoke1|scratch|delete|h||0|/s|p",              // nfs port empty
           "spoke1|scratch|delete|h|2049||/s|p",           // mount port empty
           "spoke1|scratch|delete|h|2049|-1|/s|p",         // mount port negative
           "spoke1|scratch|delete|h|2049|0|s|p",           // share not absolute
           "spoke1|scratch|delete|h|2049|0|/s/../x|p",     // share escapes
           "spoke1|scratch|delete|h|2049|0|/s|../p",       // path escapes
           "spoke1|scratch|delete|h|2049|0|/s|a/../../p",  // path escapes
           "spoke1|scratch|delete|h|2049|0|/s|/etc",       // absolute path
           "spoke1|scratch|delete|h|2049|0|/s|",           // scratch = share root
           "spoke1|scratch|delete|h/x|2049|0|/s|p",        // server
           "spoke1|scratch|delete||2049|0|/s|p",           // no server
           std::string("spoke1|scratch|delete|h|2049|0|/s|a\0b", 36),
           "spoke1|scratch|delete|h|2049|0|/s|" + std::string(3000, 'a'),
       }) {
    auto r = VolumeId::Decode(bad);
    EXPECT_FALSE(r) << "accepted '" << bad << "'";
    if (!r) {
      EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
    }
  }
}

TEST(VolumeIdTest, EveryAcceptedParameterSetGivesADecodableId) {
  // Whatever ParseVolumeParams accepts must encode to an id Decode accepts, or DeleteVolume
  // could not find the volume again.
  for (std::string share : {"/srv/export", "/", "/a b", "/a|b"}) {
    for (std::string sub : {"x", "a/b", "c|d", "a b"}) {
      StringMap m = {{"server", "h"}, {"share", share}, {"mode", "dataset"}, {"subDir", sub}};
      auto p = ParseVolumeParams(m);
      if (!p) continue;
      VolumeId id{p->hub, p->mode, p->on_delete, p->sub_dir};
      auto back = VolumeId::Decode(id.Encode());
      ASSERT_TRUE(back) << share << " " << sub << ": " << back.error().message();
      EXPECT_EQ(*back, id);
    }
  }
}

TEST(VolumeContextTest, RoundTripAndInlineSubDir) {
  auto p = ParseVolumeParams({{"server", "h"},
                              {"share", "/s"},
                              {"mode", "scratch"},
                              {"nfsPort", "20491"},
                              {"mountPort", "20492"},
                              {"consistency", "ttl"},
                              {"ttlSeconds", "5"},
                              {"hubTimeoutSeconds", "4"}});
  ASSERT_TRUE(p) << p.error().message();
  VolumeContext c = MakeVolumeContext(*p, "teams/pv-1");
  auto back = VolumeContext::FromMap(c.ToMap());
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(back->hub, c.hub);
  EXPECT_EQ(back->mode, VolumeMode::kScratch);
  EXPECT_EQ(back->path, "teams/pv-1");
  EXPECT_EQ(back->cache, c.cache);
  EXPECT_EQ(back->hub_timeout_seconds, 4);
  EXPECT_FALSE(back->read_only());
  EXPECT_FALSE(back->mount_group);
  c.mount_group = 2000;  // a pod's fsGroup, from the node plugin
  back = VolumeContext::FromMap(c.ToMap());
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(back->mount_group, 2000u);
  StringMap bad_group = c.ToMap();
  bad_group[std::string(kCtxMountGroup)] = "-1";
  auto refused = VolumeContext::FromMap(bad_group);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find(kCtxMountGroup), std::string::npos);
  // Inline volume attributes give subDir; kubelet's pod info is ignored.
  auto inline_ctx = VolumeContext::FromMap({{"server", "h"},
                                            {"share", "/s"},
                                            {"subDir", "imagenet"},
                                            {"csi.storage.k8s.io/pod.name", "p"}});
  ASSERT_TRUE(inline_ctx) << inline_ctx.error().message();
  EXPECT_EQ(inline_ctx->path, "imagenet");
  EXPECT_TRUE(inline_ctx->read_only());
  auto escape = VolumeContext::FromMap({{"server", "h"}, {"share", "/s"}, {"path", "../x"}});
  ASSERT_FALSE(escape);
  EXPECT_NE(escape.error().message().find("path"), std::string::npos);
}

// A share of "/x?uid=1234&gid=1234" glued into a libnfs URL sets libnfs options: every URL
// metacharacter, whitespace and NUL is refused in share, subDir and path, naming the field.
TEST(VolumeParamsTest, UrlMetacharactersAreRejected) {
  for (std::string bad :
       {std::string("?"), std::string("&"), std::string("="), std::string("#"), std::string("%"),
        std::string(" "), std::string("\t"), std::string(1, '\0')}) {
    StringMap share = Base();
    share["share"] = "/x" + bad + "uid=1234";
    ExpectRejected(share, "share");
    StringMap sub = Base();
    sub["subDir"] = "a" + bad + "b";
    ExpectRejected(sub, "subDir");
    StringMap dataset = {
        {"server", "h"}, {"share", "/s"}, {"mode", "dataset"}, {"subDir", "d" + bad}};
    ExpectRejected(dataset, "subDir");
    auto ctx = VolumeContext::FromMap({{"server", "h"}, {"share", "/s"}, {"path", "p" + bad}});
    ASSERT_FALSE(ctx);
    EXPECT_NE(ctx.error().message().find("path"), std::string::npos);
    EXPECT_FALSE(VolumeId::Decode("spoke1|dataset|retain|h|2049|0|/s|p" + bad));
  }
  auto smuggled =
      ParseVolumeParams({{"server", "h"}, {"share", "/x?uid=0&gid=0"}, {"mode", "dataset"}});
  ASSERT_FALSE(smuggled);
  EXPECT_NE(smuggled.error().message().find("'?'"), std::string::npos)
      << smuggled.error().message();
  EXPECT_FALSE(ParseNfsUrl("nfs://h/x&uid=0"));
  EXPECT_FALSE(ParseNfsUrl("nfs://h/x%3Fuid=0"));
  EXPECT_FALSE(HubAddress({"h", 2049, 0, "/x?uid=0"}).Validate());
  EXPECT_TRUE(HubAddress({"h", 2049, 0, "/x"}).Validate());
}

TEST(VolumeParamsTest, HubIdentity) {
  auto d = ParseVolumeParams(Base());
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_EQ(d->identity.mode, HubIdentity::kCaller);
  EXPECT_EQ(d->identity.uid, 65534u);
  EXPECT_EQ(d->identity.gid, 65534u);
  EXPECT_FALSE(d->identity.allow_root);
  // Root callers are squashed to hubUid/hubGid; others pass through.
  EXPECT_EQ(d->identity.ForCaller(0, 0), std::make_pair(65534u, 65534u));
  EXPECT_EQ(d->identity.ForCaller(1000, 100), std::make_pair(1000u, 100u));

  StringMap fixed = Base();
  fixed["hubIdentity"] = "fixed";
  fixed["hubUid"] = "2000";
  fixed["hubGid"] = "3000";
  auto f = ParseVolumeParams(fixed);
  ASSERT_TRUE(f) << f.error().message();
  EXPECT_EQ(f->identity.ForCaller(1000, 100), std::make_pair(2000u, 3000u));
  auto ctx = VolumeContext::FromMap(MakeVolumeContext(*f, "p").ToMap());
  ASSERT_TRUE(ctx) << ctx.error().message();
  EXPECT_EQ(ctx->identity, f->identity);

  StringMap root = Base();
  root["hubUid"] = "0";
  auto refused = ParseVolumeParams(root);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("hubUid"), std::string::npos);
  EXPECT_NE(refused.error().message().find("allowRoot"), std::string::npos);
  root["allowRoot"] = "true";
  auto allowed = ParseVolumeParams(root);
  ASSERT_TRUE(allowed) << allowed.error().message();
  EXPECT_EQ(allowed->identity.ForCaller(0, 0), std::make_pair(0u, 0u));

  for (auto [k, v] : {std::pair{"hubIdentity", "root"},
                      {"hubUid", "4294967295"},
                      {"hubGid", "-1"},
                      {"allowRoot", "yes"},
                      {"hubUid", "x"}}) {
    StringMap m = Base();
    m[k] = v;
    ExpectRejected(m, k);
  }
}

// The id keeps what DeleteVolume needs of the identity; the default adds no field.
TEST(VolumeIdTest, IdentityField) {
  VolumeId id{HubAddress{"h", 2049, 0, "/s"}, VolumeMode::kScratch, OnDelete::kDelete, "p"};
  EXPECT_EQ(id.Encode(), "spoke1|scratch|delete|h|2049|0|/s|p");
  id.identity.uid = 2000;
  id.identity.gid = 3000;
  EXPECT_EQ(id.Encode(), "spoke1|scratch|delete|h|2049|0|/s|p|2000:3000");
  EXPECT_EQ(VolumeId::Decode(id.Encode()).value_or(VolumeId{}), id);
  VolumeId root = id;
  root.identity = HubIdentityParams{};
  root.identity.allow_root = true;
  EXPECT_EQ(VolumeId::Decode(root.Encode()).value_or(VolumeId{}), root);
  for (const char* bad : {"|0:0", "|65534:65534", "|2000", "|x:1", "|", "|ROOT"}) {
    EXPECT_FALSE(VolumeId::Decode(std::string("spoke1|scratch|delete|h|2049|0|/s|p") + bad)) << bad;
  }
}

// Found by fuzz_nfs_url: "hub:2050" was a valid server, and in the libnfs URL its ':' reads
// as a port. IPv6 literals are bracketed; a port is only ever nfsPort.
TEST(VolumeParamsTest, ServerCannotCarryAPort) {
  StringMap m = Base();
  m["server"] = "hub:2050";
  ExpectRejected(m, "server");
  m["server"] = "fd00::1";
  ExpectRejected(m, "server");
  m["server"] = "[fd00::1]";
  EXPECT_TRUE(ParseVolumeParams(m));
  EXPECT_FALSE(ParseNfsUrl("nfs://hubfs:mpl.com:2/data/"));
  auto v6 = ParseNfsUrl("nfs://[fd00::1]:2050/x");
  ASSERT_TRUE(v6) << v6.error().message();
  EXPECT_EQ(v6->server, "[fd00::1]");
  EXPECT_EQ(v6->nfs_port, 2050);
  EXPECT_EQ(ParseNfsUrl(v6->NfsUrl()).value_or(HubAddress{}), *v6);
}

TEST(VolumeMetricsLabelTest, StableAndOpaque) {
  std::string id = "spoke1|scratch|delete|h|2049|0|/srv/secret|team/pv-1";
  EXPECT_EQ(VolumeMetricsLabel(id), VolumeMetricsLabel(id));
  EXPECT_NE(VolumeMetricsLabel(id), VolumeMetricsLabel(id + "x"));
  EXPECT_EQ(VolumeMetricsLabel(id).size(), 17u);
  EXPECT_EQ(VolumeMetricsLabel(id).find("secret"), std::string::npos);
}

TEST(NfsUrlTest, ParseAndFormat) {
  HubAddress h{"127.0.0.1", 20491, 20492, "/srv/export"};
  EXPECT_EQ(h.NfsUrl(), "nfs://127.0.0.1/srv/export?version=3&nfsport=20491&mountport=20492");
  auto back = ParseNfsUrl(h.NfsUrl());
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(*back, h);
  EXPECT_FALSE(ParseNfsUrl("http://h/s"));
  EXPECT_FALSE(ParseNfsUrl("nfs://h/s?version=4"));
  EXPECT_FALSE(ParseNfsUrl("nfs://h/s/../x"));
  EXPECT_FALSE(ParseNfsUrl("nfs://h/s?bogus=1"));
}

}  // namespace
}  // namespace spoke
