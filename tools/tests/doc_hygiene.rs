//! Documentation hygiene: the docs state what is, not how or when they were written, and every
//! path they name exists.
//!
//! Checked files: `docs/**/*.md`, every `README.md` in the repository, every file under
//! `scripts/`, and every shell or Python script elsewhere (`bench/peers/`, `bench/probes/`, CI).
//! `CHANGELOG.md` keeps the project's history and is exempt. A failure names the file, the line
//! and what the line says that it should not:
//!
//! - work history: ordinal sessions ("tenth session"), "round of work", "this round", numbered
//!   calls ("call 12", "calls 3-5"), issues ("issue 18", "issues 6 and 7", "#18"), dates as
//!   headings, commit hashes in prose, the development machine;
//! - a path the repository does not have: in markdown, tokens of code spans, fenced blocks and
//!   link targets; in scripts, every token. A token is a path when it contains `/` and starts
//!   with a top-level entry of the repository, when it ends in a source or doc extension, or when
//!   it is a relative link target. It resolves against the repository root and, in markdown,
//!   against the doc's folder; a bare file name (or a path not starting with a top-level entry)
//!   matches any tracked file it is a suffix of. Paths under `target/`, `devbin/` (built by
//!   `scripts/device/kit.sh`) and `$OUT/`, URLs, and globs or placeholders (`<name>`, `*`,
//!   `{a,b}`, `...`, `$VAR`) pass, and so does [`PRODUCED`];
//! - a link into a doc of [`ANCHORED`] (`decisions.md#anchor`, `benchmarks.md#anchor`, or `#anchor`
//!   inside that doc) whose anchor is no heading of the doc (GitHub's slugs: lowercase, spaces to
//!   `-`, other punctuation dropped). Checked in the files above and in Rust files under
//!   `*/src/`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Paths that no file in the repository is but a documented command produces. One line of
/// reason each; keep this short.
const PRODUCED: &[(&str, &str)] = &[
    // (path, the command that makes it)
];

/// The variables scripts hold the repository's root in.
const ROOT_VARS: &[&str] = &["ROOT", "REPO", "CHECKOUT"];

/// Docs whose anchors links are checked against their headings.
const ANCHORED: &[&str] = &["docs/decisions.md", "docs/benchmarks.md"];

/// Extensions a bare token must end in to be taken for a file name.
const EXTENSIONS: &[&str] = &[
    "rs", "md", "toml", "sh", "py", "c", "h", "cu", "cuh", "cc", "cpp", "hpp", "wgsl", "glsl", "comp", "spvasm",
    "mlir", "cmake", "yml", "yaml", "lock",
];

/// Folders that commands produce, so that a path under them is not checked: cargo's target
/// directory; the device kit (`scripts/device/kit.sh`), with perf beside it (`kit.sh --perf`) and
/// the Vulkan loader's packages (`kit.sh --vulkan-loader`); the peers' kit
/// (`bench/peers/prepare.sh`).
const PRODUCED_DIRS: &[&str] = &["target", "devbin", "devperf", ".gl", "devpeers"];

const ORDINALS: &[&str] = &[
    "first",
    "second",
    "third",
    "fourth",
    "fifth",
    "sixth",
    "seventh",
    "eighth",
    "ninth",
    "tenth",
    "eleventh",
    "twelfth",
    "thirteenth",
    "fourteenth",
    "fifteenth",
    "sixteenth",
    "seventeenth",
    "eighteenth",
    "nineteenth",
    "twentieth",
    "last",
    "previous",
    "prior",
    "earlier",
    "this",
    "next",
    "later",
];

/// The repository as the check sees it: its files (tracked, or untracked and not ignored), the
/// folders they are in, and its top-level names.
struct Repo {
    root: PathBuf,
    files: BTreeSet<String>,
    dirs: BTreeSet<String>,
    top: BTreeSet<String>,
}

impl Repo {
    fn new(root: PathBuf, files: BTreeSet<String>, extra_top: &[String]) -> Self {
        let mut dirs = BTreeSet::new();
        let mut top = BTreeSet::new();
        for f in &files {
            let mut acc = String::new();
            let parts: Vec<&str> = f.split('/').collect();
            top.insert(parts[0].to_string());
            for p in &parts[..parts.len() - 1] {
                if !acc.is_empty() {
                    acc.push('/');
                }
                acc.push_str(p);
                dirs.insert(acc.clone());
            }
        }
        top.extend(extra_top.iter().cloned());
        top.remove("");
        Repo { root, files, dirs, top }
    }

    fn load() -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().expect("repo root");
        let out = Command::new("git")
            .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard"])
            .current_dir(&root)
            .output()
            .expect("git ls-files: the check lists the repository's files with git");
        assert!(out.status.success(), "git ls-files failed in {}", root.display());
        let files: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
            .split('\0')
            .filter(|s| !s.is_empty())
            // A file deleted in the work tree but still in the index is not there.
            .filter(|s| root.join(s).exists())
            .map(str::to_string)
            .collect();
        // Top-level names also come from the root .gitignore and the root folder, so that a path
        // into an ignored folder (`devpeers/`, `.gl/`) counts as a path and fails.
        let mut extra = Vec::new();
        if let Ok(gi) = std::fs::read_to_string(root.join(".gitignore")) {
            for l in gi.lines() {
                let l = l.trim().trim_start_matches('/').trim_end_matches('/');
                if !l.is_empty() && !l.starts_with('#') && !l.contains('/') && !l.contains('*') {
                    extra.push(l.to_string());
                }
            }
        }
        if let Ok(rd) = std::fs::read_dir(&root) {
            for e in rd.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if n != ".git" {
                    extra.push(n);
                }
            }
        }
        Repo::new(root, files, &extra)
    }

    fn has(&self, p: &str) -> bool {
        p.is_empty() || self.files.contains(p) || self.dirs.contains(p)
    }

    fn has_suffix(&self, p: &str) -> bool {
        let tail = format!("/{p}");
        self.files.iter().chain(self.dirs.iter()).any(|f| f == p || f.ends_with(&tail))
    }
}

/// `a/./b/../c` → `a/c`, relative to `base` (a folder relative to the root, "" for the root).
/// `None` when it climbs out of the repository.
fn normalize(base: &str, p: &str) -> Option<String> {
    let mut out: Vec<&str> = base.split('/').filter(|s| !s.is_empty()).collect();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                out.pop()?;
            }
            c => out.push(c),
        }
    }
    Some(out.join("/"))
}

/// A problem on a line: what it says.
fn history_words(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let lower = line.to_lowercase();
    // Words with their byte offsets, and what separates each from the next.
    let mut words: Vec<(usize, &str)> = Vec::new();
    let mut start = None;
    for (i, ch) in lower.char_indices() {
        if ch.is_alphanumeric() {
            start.get_or_insert(i);
        } else if let Some(s) = start.take() {
            words.push((s, &lower[s..i]));
        }
    }
    if let Some(s) = start {
        words.push((s, &lower[s..]));
    }
    let is_num = |w: &str| w.chars().all(|c| c.is_ascii_digit());
    let is_ordinal = |w: &str| {
        ORDINALS.contains(&w)
            || (w.len() > 2 && ["st", "nd", "rd", "th"].iter().any(|s| w.ends_with(s)) && is_num(&w[..w.len() - 2]))
    };
    let gap = |a: usize, b: usize| &lower[words[a].0 + words[a].1.len()..words[b].0];
    for i in 0..words.len() {
        let w = words[i].1;
        let next = words.get(i + 1).map(|x| x.1);
        let sep_is_space = |j: usize| j + 1 < words.len() && gap(j, j + 1).trim_start_matches(' ').is_empty();
        match (w, next) {
            (o, Some("session" | "sessions")) if is_ordinal(o) && sep_is_space(i) => {
                found.push(format!("speaks of a session of work (\"{o} session\")"));
            }
            ("session" | "sessions", Some(n)) if is_num(n) && sep_is_space(i) => {
                found.push(format!("speaks of a session of work (\"session {n}\")"));
            }
            ("round" | "rounds", Some("of")) if words.get(i + 2).map(|x| x.1) == Some("work") => {
                found.push("speaks of a round of work".into());
            }
            ("this" | "previous" | "earlier" | "prior", Some("round" | "rounds")) if sep_is_space(i) => {
                found.push(format!("speaks of a round of work (\"{w} round\")"));
            }
            // "call 5 ms into" is a time, and a report's "host calls 0 in use" a count, not a
            // numbered call.
            ("call" | "calls", Some(n))
                if is_num(n)
                    && sep_is_space(i)
                    && !matches!(words.get(i + 2).map(|x| x.1), Some("ms" | "us" | "ns" | "s" | "µs" | "times"))
                    && !(words.get(i + 2).map(|x| x.1) == Some("in")
                        && words.get(i + 3).map(|x| x.1) == Some("use")) =>
            {
                found.push(format!("names a numbered call (\"{w} {n}\")"));
            }
            ("issue" | "issues", Some(n))
                if is_num(n) && matches!(gap(i, i + 1).trim(), "" | "#") && !gap(i, i + 1).is_empty() =>
            {
                found.push(format!("names an issue (\"{w} {n}\")"));
            }
            ("commit" | "commits", Some(h))
                if h.len() >= 7
                    && h.len() <= 40
                    && h.chars().all(|c| c.is_ascii_hexdigit())
                    && h.chars().any(|c| c.is_ascii_digit())
                    && sep_is_space(i) =>
            {
                found.push(format!("names a commit in prose (\"{w} {h}\")"));
            }
            ("development" | "dev", Some("machine" | "machines" | "box")) => {
                found.push("speaks of the machine the project is developed on".into());
            }
            _ => {}
        }
    }
    // "#18": a number right after '#', at a word start, outside code spans and quotes (a report's
    // "all-reduce #4" is a number, not an issue).
    let b = line.as_bytes();
    for i in 0..b.len() {
        let quoted = b[..i].iter().filter(|&&c| c == b'`').count() % 2 == 1
            || b[..i].iter().filter(|&&c| c == b'"').count() % 2 == 1;
        if !quoted
            && b[i] == b'#'
            && (i == 0 || matches!(b[i - 1], b' ' | b'(' | b'[' | b',' | b'\t'))
            && i + 1 < b.len()
            && b[i + 1].is_ascii_digit()
        {
            let end = (i + 1..b.len()).find(|&j| !b[j].is_ascii_digit()).unwrap_or(b.len());
            if end == b.len() || !b[end].is_ascii_alphanumeric() {
                found.push(format!("names an issue (\"{}\")", &line[i..end]));
            }
        }
    }
    // A date as a heading.
    if line.starts_with('#') && has_date(line) {
        found.push("has a date as a heading".into());
    }
    found
}

fn has_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.windows(10).any(|w| {
        w[..4].iter().all(u8::is_ascii_digit)
            && w[4] == b'-'
            && w[5..7].iter().all(u8::is_ascii_digit)
            && w[7] == b'-'
            && w[8..].iter().all(u8::is_ascii_digit)
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// A word in a code span or fenced block of markdown.
    Code,
    /// A markdown link target: always a path.
    Link,
    /// A word of a script.
    Script,
}

/// The token with its surrounding punctuation and line suffixes taken off.
fn clean(tok: &str) -> &str {
    let mut t = tok.trim_matches(|c: char| "\"'`(),;[]!?".contains(c));
    t = t.trim_end_matches(['.', ':']);
    // `file.rs:120` or `file.rs:120:4`.
    while let Some(i) = t.rfind(':') {
        if !t[i + 1..].is_empty() && t[i + 1..].chars().all(|c| c.is_ascii_digit()) {
            t = &t[..i];
        } else {
            break;
        }
    }
    t
}

/// Why this token is a path the repository does not have, or `None`.
fn bad_path(repo: &Repo, doc_dir: &str, raw: &str, kind: Kind) -> Option<String> {
    let mut t = clean(raw);
    if kind == Kind::Link {
        t = t.split('#').next().unwrap_or("");
        t = t.split_whitespace().next().unwrap_or("");
    }
    if t.is_empty() || t.contains("://") || t.starts_with("mailto:") {
        return None;
    }
    if t.starts_with("$OUT/") || t.starts_with("${OUT}/") {
        return None;
    }
    // A script's `$ROOT/x` or `${ROOT}/x`: check `x` from the root. Other variables name other
    // folders (`$release/examples/x` is under the target directory), which the check cannot follow.
    let mut from_var = false;
    if kind == Kind::Script && t.starts_with('$') {
        let i = t.find('/')?;
        let var = t[..i].trim_matches(['$', '{', '}']);
        if !ROOT_VARS.contains(&var) {
            return None;
        }
        t = &t[i + 1..];
        from_var = true;
    }
    const PLACEHOLDER: &[&str] = &["<", ">", "*", "{", "}", "...", "$", "%", "\\", "|", "?", "…"];
    if PLACEHOLDER.iter().any(|p| t.contains(p)) {
        return None;
    }
    if !t.chars().all(|c| c.is_ascii_alphanumeric() || "/._+-@=".contains(c)) || t.contains('=') {
        return None;
    }
    if t.starts_with('/') || t.starts_with('~') || t.starts_with('-') || t.starts_with('@') {
        return None;
    }
    let t = t.strip_prefix("./").unwrap_or(t);
    let first = t.split('/').next().unwrap_or("");
    let rooted = t.contains('/') && repo.top.contains(first);
    let ext =
        t.rsplit_once('.').is_some_and(|(stem, e)| !stem.is_empty() && !stem.ends_with('/') && EXTENSIONS.contains(&e));
    let looks = match kind {
        Kind::Link => true,
        Kind::Code => rooted || (ext && !t.starts_with("..")) || (t.starts_with("../") && ext),
        Kind::Script => rooted && (from_var || !t.starts_with("..")),
    };
    if !looks {
        return None;
    }
    let in_produced = |p: &str| {
        p.split('/').any(|c| c == "target")
            || PRODUCED_DIRS.iter().any(|d| p == *d || p.starts_with(&format!("{d}/")))
            || PRODUCED.iter().any(|(a, _)| p == *a || p.starts_with(&format!("{}/", a.trim_end_matches('/'))))
    };
    let from_root = normalize("", t);
    let from_doc = if kind == Kind::Script { None } else { normalize(doc_dir, t) };
    for p in [&from_root, &from_doc].into_iter().flatten() {
        if repo.has(p) || in_produced(p) {
            return None;
        }
    }
    if kind == Kind::Code && !rooted && !t.starts_with("..") && repo.has_suffix(t.trim_end_matches('/')) {
        return None;
    }
    Some(format!("names `{t}`, which the repository does not have"))
}

/// The problems of one file, as `path:line: what`.
fn check_file(repo: &Repo, rel: &str, text: &str) -> Vec<String> {
    let markdown = rel.ends_with(".md");
    let doc_dir = rel.rsplit_once('/').map_or("", |(d, _)| d);
    let mut out = Vec::new();
    let mut in_fence = false;
    for (n, line) in text.lines().enumerate() {
        let at = |what: String| format!("{rel}:{}: {what}\n    {}", n + 1, line.trim());
        for w in history_words(line) {
            out.push(at(w));
        }
        let mut tokens: Vec<(String, Kind)> = Vec::new();
        let split = |s: &str, k: Kind, v: &mut Vec<(String, Kind)>| {
            for t in s.split(|c: char| c.is_whitespace() || "\"'`=,;()".contains(c)) {
                if !t.is_empty() {
                    v.push((t.to_string(), k));
                }
            }
        };
        if !markdown {
            split(line, Kind::Script, &mut tokens);
        } else if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        } else if in_fence {
            split(line, Kind::Code, &mut tokens);
        } else {
            // Code spans: text between pairs of backticks.
            let parts: Vec<&str> = line.split('`').collect();
            for (i, p) in parts.iter().enumerate() {
                if i % 2 == 1 && i + 1 < parts.len() {
                    split(p, Kind::Code, &mut tokens);
                }
            }
            // Link targets: `](target)`.
            let mut rest = line;
            while let Some(i) = rest.find("](") {
                rest = &rest[i + 2..];
                let end = rest.find(')').unwrap_or(rest.len());
                tokens.push((rest[..end].to_string(), Kind::Link));
                rest = &rest[end..];
            }
        }
        for (t, k) in tokens {
            if let Some(why) = bad_path(repo, doc_dir, &t, k) {
                out.push(at(why));
            }
        }
    }
    out
}

/// The files the check reads, relative to the root.
fn checked_files(repo: &Repo) -> Vec<String> {
    repo.files
        .iter()
        .filter(|f| {
            let name = f.rsplit('/').next().unwrap_or(f);
            name != "CHANGELOG.md"
                && ((f.starts_with("docs/") && f.ends_with(".md"))
                    || name == "README.md"
                    || f.starts_with("scripts/")
                    || [".sh", ".py"].iter().any(|e| f.ends_with(e)))
        })
        .cloned()
        .collect()
}

/// GitHub's anchor for a heading's text: lowercase, spaces to `-`, punctuation other than `-` and
/// `_` dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a markdown doc's headings (outside fenced blocks); a repeated slug gets `-1`,
/// `-2`, ... as on GitHub.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut in_fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        let hashes = line.bytes().take_while(|&b| b == b'#').count();
        if in_fence || hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let s = slug(&line[hashes..]);
        let n = seen.entry(s.clone()).or_insert(0);
        out.insert(if *n == 0 { s.clone() } else { format!("{s}-{n}") });
        *n += 1;
    }
    out
}

/// The anchored docs' anchors, keyed by the docs' file names (`decisions.md`).
type Anchors = BTreeMap<String, BTreeSet<String>>;

/// The links of one file into an anchored doc whose anchor that doc has no heading for.
fn bad_anchors(docs: &Anchors, rel: &str, text: &str) -> Vec<String> {
    let own = docs.iter().find(|(name, _)| rel == format!("docs/{name}")).map(|(_, a)| a);
    let anchor_at =
        |s: &str| -> String { s.chars().take_while(|c| c.is_alphanumeric() || *c == '-' || *c == '_').collect() };
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let mut check = |doc: &str, set: &BTreeSet<String>, anchor: String| {
            if !set.contains(&anchor) {
                out.push(format!(
                    "{rel}:{}: links to `{doc}#{anchor}`, which is no heading of {doc}\n    {}",
                    n + 1,
                    line.trim()
                ));
            }
        };
        for (name, set) in docs {
            let pat = format!("{name}#");
            for (i, _) in line.match_indices(&pat) {
                check(name, set, anchor_at(&line[i + pat.len()..]));
            }
        }
        if let Some(set) = own {
            for (i, _) in line.match_indices("](#") {
                check(rel.rsplit('/').next().unwrap_or(rel), set, anchor_at(&line[i + 3..]));
            }
        }
    }
    out
}

#[test]
fn anchors_exist() {
    let repo = Repo::load();
    let mut docs = Anchors::new();
    for d in ANCHORED {
        let text = std::fs::read_to_string(repo.root.join(d)).unwrap_or_else(|e| panic!("{d}: {e}"));
        docs.insert(d.rsplit('/').next().unwrap().to_string(), anchors(&text));
    }
    let mut problems = Vec::new();
    let rust_src = repo.files.iter().filter(|f| f.ends_with(".rs") && f.split('/').nth(1) == Some("src")).cloned();
    for rel in checked_files(&repo).into_iter().chain(rust_src) {
        let Ok(text) = std::fs::read_to_string(repo.root.join(&rel)) else {
            continue; // binary
        };
        problems.extend(bad_anchors(&docs, &rel, &text));
    }
    assert!(
        problems.is_empty(),
        "{} link(s) to a heading that is not there; link to an existing `## heading` (its GitHub \
         anchor) or add the entry:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn docs_state_what_is() {
    let repo = Repo::load();
    let mut problems = Vec::new();
    for rel in checked_files(&repo) {
        let Ok(text) = std::fs::read_to_string(repo.root.join(&rel)) else {
            continue; // binary
        };
        problems.extend(check_file(&repo, &rel, &text));
    }
    assert!(
        problems.is_empty(),
        "{} documentation problem(s); docs state the current facts (history goes in CHANGELOG.md \
         and git), and every path they name exists:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[cfg(test)]
mod detector {
    use super::*;

    fn repo() -> Repo {
        let files = ["docs/contract.md", "hal/src/lib.rs", "hal/README.md", "scripts/device/kit.sh"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        Repo::new(PathBuf::from("/nonexistent"), files, &["devpeers".into(), ".gl".into()])
    }

    fn flags(rel: &str, text: &str) -> Vec<String> {
        check_file(&repo(), rel, text)
    }

    #[test]
    fn history_fails() {
        for line in [
            "Fixed in issue 18.",
            "See issues 6 and 7.",
            "as #18 showed",
            "The tenth session measured it.",
            "In the 3rd session we",
            "this round of work",
            "This round adds a test.",
            "calls 3-5 measured",
            "Call 12 found it.",
            "## 2024-05-01",
            "measured at commit 2d342c4",
            "on the development machine",
        ] {
            assert!(!flags("docs/x.md", line).is_empty(), "not flagged: {line}");
        }
    }

    #[test]
    fn ordinary_words_pass() {
        for line in [
            "A round trip costs 5 µs.",
            "the call returns",
            "IssueReport carries it",
            "`hal::driver::Device` is the trait",
            "the first round of the ring allreduce",
            "a session of the C API",
            "calls the callback",
            "makes the call 5 ms into a kernel",
            "## Conformance",
            "the 2nd argument",
            "its report says \"execute (all-reduce #4)\"",
            "host calls 0 in use / 0 created",
        ] {
            assert_eq!(flags("docs/x.md", line), Vec::<String>::new(), "flagged: {line}");
        }
    }

    #[test]
    fn missing_paths_fail() {
        for line in [
            "See `docs/nope.md`.",
            "Run `bash devkit/run.sh`.",
            "Notes in `docs/old/notes.md`.",
            "[the contract](nope.md)",
            "Read `module.rs`.",
        ] {
            assert!(!flags("docs/x.md", line).is_empty(), "not flagged: {line}");
        }
        assert!(!flags("scripts/device/run.sh", "source \"$ROOT/scripts/gpu/lib.sh\"").is_empty());
        assert!(!flags("docs/x.md", "```\nbash scripts/gpu/cts-run.sh\n```").is_empty());
    }

    #[test]
    fn existing_and_produced_paths_pass() {
        for line in [
            "See `docs/contract.md` and `hal/src/lib.rs:12`.",
            "[the contract](contract.md#kernels), [hal](../hal/README.md)",
            "`bash scripts/device/kit.sh`, then `bash devbin/run.sh cts`",
            "`target/release/hal`, `$OUT/cts.json`, `hal/src/<name>.rs`, `hal/src/*.rs`",
            "`lib.rs` and `src/lib.rs`",
            "https://example.com/a/b.md and [x](https://example.com/docs/nope.md)",
            "`hal::driver` and `read/write`",
        ] {
            assert_eq!(flags("docs/x.md", line), Vec::<String>::new(), "flagged: {line}");
        }
        assert_eq!(flags("hal/README.md", "`src/lib.rs`"), Vec::<String>::new());
        assert_eq!(flags("scripts/device/run.sh", "cp \"$OUT/x\" devbin/hal target/x"), Vec::<String>::new());
    }

    fn anchored() -> Anchors {
        let decisions = "# Decisions\n\n## free-gate\n\ntext\n\n```\n## not-a-heading\n```\n";
        let benchmarks = "# Benchmarks\n## Vulkan on an H200 (NVIDIA's driver)\n## Results\n### Results\n";
        [("decisions.md", decisions), ("benchmarks.md", benchmarks)]
            .iter()
            .map(|(n, t)| (n.to_string(), anchors(t)))
            .collect()
    }

    #[test]
    fn slugs_follow_github() {
        assert_eq!(slug(" Vulkan on an H200 (NVIDIA's driver)"), "vulkan-on-an-h200-nvidias-driver");
        assert_eq!(slug(" cpu-sim"), "cpu-sim");
        assert_eq!(slug(" Result files and the generated tables"), "result-files-and-the-generated-tables");
    }

    #[test]
    fn existing_anchors_pass() {
        let docs = anchored();
        for (rel, line) in [
            ("hal/src/lib.rs", "//! (`docs/decisions.md#free-gate` has the measurement)"),
            ("docs/x.md", "[decisions.md](decisions.md#free-gate), [b](benchmarks.md#results-1)"),
            ("docs/x.md", "see `docs/benchmarks.md#vulkan-on-an-h200-nvidias-driver`"),
            ("docs/decisions.md", "as in [free-gate](#free-gate)"),
            ("docs/x.md", "[elsewhere](#not-checked-outside-the-anchored-docs)"),
        ] {
            assert_eq!(bad_anchors(&docs, rel, line), Vec::<String>::new(), "flagged: {line}");
        }
    }

    #[test]
    fn missing_anchors_fail() {
        let docs = anchored();
        for (rel, line) in [
            ("hal/src/lib.rs", "//! (`docs/decisions.md#completion-thread-default` has it)"),
            ("docs/x.md", "[decisions.md](decisions.md#not-a-heading)"),
            ("docs/x.md", "[b](benchmarks.md#results-2)"),
            ("docs/decisions.md", "as in [gone](#gone)"),
        ] {
            assert_eq!(bad_anchors(&docs, rel, line).len(), 1, "not flagged: {line}");
        }
    }
}
