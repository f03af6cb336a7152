//! The table machinery; op declarations live in the family files beside this folder.

pub mod body;
pub mod channels_last;
pub mod claim;
pub mod consts;
pub mod coverage;
pub mod dtypes;
pub mod lower;
pub mod narrow;
pub mod node;
pub mod registry;
pub mod spec;
#[cfg(test)]
pub mod testing;
