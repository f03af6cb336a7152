//! The table's tests and generator binary run real MLX: give them a runpath to libmlx.

#[path = "../build-support/runpath.rs"]
mod runpath;

fn main() {
    runpath::link_to_mlx();
}
