//! Is this binary able to run `FROM scratch`? Only if the kernel can start it without a
//! dynamic loader, i.e. its ELF program headers have no `PT_INTERP` entry. A static-pie
//! binary (what this workspace builds) has `PT_DYNAMIC` for self-relocation but no
//! interpreter, so `PT_INTERP` is the one header that matters.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

const PT_INTERP: u32 = 3;
/// More program headers than any real executable has; bounds the read of a corrupt file.
const MAX_PROGRAM_HEADERS: u16 = 512;

/// How the kernel would start the file.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum ElfLinkage {
    /// No `PT_INTERP`: runs in an empty image.
    Static,
    /// Needs the named loader (e.g. `/lib64/ld-linux-x86-64.so.2`) and its libraries.
    Dynamic {
        /// The loader's path, from `PT_INTERP`.
        interpreter: String,
    },
    /// Not an ELF file, or one too damaged to read; the text says what is wrong.
    NotElf(String),
}

/// Reads only the ELF header and the program header table, not the whole file.
pub(crate) fn elf_linkage(path: &Path) -> io::Result<ElfLinkage> {
    let mut file = File::open(path)?;
    let mut ident = [0u8; 64];
    let read = read_up_to(&mut file, &mut ident)?;
    if read < 16 || &ident[..4] != b"\x7fELF" {
        return Ok(ElfLinkage::NotElf("no ELF magic number".into()));
    }
    let is_64 = match ident[4] {
        1 => false,
        2 => true,
        other => return Ok(ElfLinkage::NotElf(format!("unknown ELF class {other}"))),
    };
    let little = match ident[5] {
        1 => true,
        2 => false,
        other => {
            return Ok(ElfLinkage::NotElf(format!(
                "unknown ELF data encoding {other}"
            )));
        }
    };
    let header_len = if is_64 { 64 } else { 52 };
    if read < header_len {
        return Ok(ElfLinkage::NotElf("truncated ELF header".into()));
    }
    let fields = Fields { little };
    let (phoff, phentsize, phnum) = if is_64 {
        (
            fields.u64(&ident[0x20..]),
            fields.u16(&ident[0x36..]),
            fields.u16(&ident[0x38..]),
        )
    } else {
        (
            u64::from(fields.u32(&ident[0x1c..])),
            fields.u16(&ident[0x2a..]),
            fields.u16(&ident[0x2c..]),
        )
    };
    let min_entry = if is_64 { 56 } else { 32 };
    if phnum == 0 {
        // No program headers at all: an object file or library, not an executable.
        return Ok(ElfLinkage::NotElf(
            "no program headers (not an executable)".into(),
        ));
    }
    if usize::from(phentsize) < min_entry || phnum > MAX_PROGRAM_HEADERS {
        return Ok(ElfLinkage::NotElf(
            "implausible program header table".into(),
        ));
    }
    let mut table = vec![0u8; usize::from(phentsize) * usize::from(phnum)];
    file.seek(SeekFrom::Start(phoff))?;
    if read_up_to(&mut file, &mut table)? < table.len() {
        return Ok(ElfLinkage::NotElf("truncated program header table".into()));
    }
    for entry in table.chunks_exact(usize::from(phentsize)) {
        if fields.u32(entry) != PT_INTERP {
            continue;
        }
        let (offset, size) = if is_64 {
            (fields.u64(&entry[0x08..]), fields.u64(&entry[0x20..]))
        } else {
            (
                u64::from(fields.u32(&entry[0x04..])),
                u64::from(fields.u32(&entry[0x10..])),
            )
        };
        let interpreter = read_interpreter(&mut file, offset, size)?;
        return Ok(ElfLinkage::Dynamic { interpreter });
    }
    Ok(ElfLinkage::Static)
}

/// The architecture the ELF file at `path` is built for, named as the Docker engine names
/// its own (`docker version`'s `Arch`: `amd64`, `arm64`, …). `None` for a file that is not
/// ELF or a machine this list does not name; [`elf_linkage`] says what is wrong with those.
pub(super) fn docker_architecture(path: &Path) -> io::Result<Option<&'static str>> {
    let mut header = [0u8; 20];
    if read_up_to(&mut File::open(path)?, &mut header)? < header.len() || &header[..4] != b"\x7fELF"
    {
        return Ok(None);
    }
    let little = header[5] == 1;
    let machine = Fields { little }.u16(&header[0x12..]);
    Ok(match machine {
        3 => Some("386"),
        62 => Some("amd64"),
        40 => Some("arm"),
        183 => Some("arm64"),
        21 if little => Some("ppc64le"),
        22 => Some("s390x"),
        243 => Some("riscv64"),
        _ => None,
    })
}

/// The loader path is only for the error message: best effort, bounded.
fn read_interpreter(file: &mut File, offset: u64, size: u64) -> io::Result<String> {
    let mut name = vec![0u8; size.min(4096) as usize];
    file.seek(SeekFrom::Start(offset))?;
    let read = read_up_to(file, &mut name)?;
    name.truncate(read);
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}

fn read_up_to(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

struct Fields {
    little: bool,
}

impl Fields {
    fn u16(&self, b: &[u8]) -> u16 {
        let raw = [b[0], b[1]];
        if self.little {
            u16::from_le_bytes(raw)
        } else {
            u16::from_be_bytes(raw)
        }
    }
    fn u32(&self, b: &[u8]) -> u32 {
        let raw = [b[0], b[1], b[2], b[3]];
        if self.little {
            u32::from_le_bytes(raw)
        } else {
            u32::from_be_bytes(raw)
        }
    }
    fn u64(&self, b: &[u8]) -> u64 {
        let raw = [b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]];
        if self.little {
            u64::from_le_bytes(raw)
        } else {
            u64::from_be_bytes(raw)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_test_binary_is_static() {
        // .cargo/config.toml links the binaries of both Linux targets with crt-static.
        let me = std::env::current_exe().unwrap();
        assert_eq!(elf_linkage(&me).unwrap(), ElfLinkage::Static);
    }

    #[test]
    fn this_test_binary_is_built_for_the_architecture_it_runs_on() {
        let me = std::env::current_exe().unwrap();
        let expected = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => panic!("no Docker name listed for {other}"),
        };
        assert_eq!(docker_architecture(&me).unwrap(), Some(expected));
    }

    #[test]
    fn a_script_has_no_architecture() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("script");
        std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
        assert_eq!(docker_architecture(&script).unwrap(), None);
    }

    #[test]
    fn system_ls_is_dynamic_with_its_loader_named() {
        let ls = Path::new("/bin/ls");
        match elf_linkage(ls).unwrap() {
            ElfLinkage::Dynamic { interpreter } => {
                assert!(interpreter.contains("ld-linux"), "{interpreter}")
            }
            other => panic!("/bin/ls: {other:?}"),
        }
    }

    #[test]
    fn scripts_and_short_files_are_not_elf() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("script");
        std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
        assert!(matches!(
            elf_linkage(&script).unwrap(),
            ElfLinkage::NotElf(_)
        ));
        let stub = dir.path().join("stub");
        std::fs::write(&stub, b"\x7fELF\x02\x01").unwrap();
        assert!(matches!(elf_linkage(&stub).unwrap(), ElfLinkage::NotElf(_)));
    }

    #[test]
    fn truncated_program_headers_are_not_elf() {
        let me = std::env::current_exe().unwrap();
        let mut head = vec![0u8; 64];
        File::open(&me).unwrap().read_exact(&mut head).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cut = dir.path().join("cut");
        std::fs::write(&cut, &head).unwrap();
        assert!(matches!(elf_linkage(&cut).unwrap(), ElfLinkage::NotElf(_)));
    }

    #[test]
    fn missing_file_is_an_io_error() {
        assert!(elf_linkage(Path::new("/nonexistent/egress-sandbox")).is_err());
    }
}
