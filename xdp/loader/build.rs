//! Builds the XDP program (crate `xdp-ebpf`) for the BPF target with the nightly pinned
//! in `xdp/ebpf/rust-toolchain.toml` and bpf-linker; the loader embeds the object. `lab/setup.sh` installs both.

fn main() -> anyhow::Result<()> {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR")?;
    let ebpf_dir = format!("{manifest_dir}/../ebpf");
    let common_dir = format!("{manifest_dir}/../common");
    let toolchain_file = format!("{ebpf_dir}/rust-toolchain.toml");
    println!("cargo:rerun-if-changed={common_dir}/src");
    println!("cargo:rerun-if-changed={toolchain_file}");
    let toolchain = pinned_channel(&std::fs::read_to_string(&toolchain_file)?)
        .ok_or_else(|| anyhow::anyhow!("{toolchain_file}: no `channel = \"…\"` line"))?;
    let package = aya_build::Package {
        name: "xdp-ebpf",
        root_dir: &ebpf_dir,
        ..Default::default()
    };
    aya_build::build_ebpf([package], aya_build::Toolchain::Custom(&toolchain))
}

/// The nightly pinned in `xdp/ebpf/rust-toolchain.toml`, by date, so a newer nightly
/// cannot change the object under us unannounced.
fn pinned_channel(toml: &str) -> Option<String> {
    toml.lines()
        .find_map(|line| line.trim().strip_prefix("channel"))
        .and_then(|rest| rest.split('"').nth(1))
        .map(str::to_owned)
}
