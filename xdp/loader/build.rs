//! Builds the XDP program (crate `xdp-ebpf`) for the BPF target with the pinned nightly
//! toolchain and bpf-linker; the loader embeds the object. `lab/setup.sh` installs both.

fn main() -> anyhow::Result<()> {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR")?;
    let ebpf_dir = format!("{manifest_dir}/../ebpf");
    let common_dir = format!("{manifest_dir}/../common");
    println!("cargo:rerun-if-changed={common_dir}/src");
    let package = aya_build::Package {
        name: "xdp-ebpf",
        root_dir: &ebpf_dir,
        ..Default::default()
    };
    aya_build::build_ebpf([package], aya_build::Toolchain::Custom(EBPF_TOOLCHAIN))
}

/// The nightly that builds the eBPF crate (`-Z build-std=core`); pinned by name so a
/// newer nightly cannot change the object under us unannounced.
const EBPF_TOOLCHAIN: &str = "nightly";
