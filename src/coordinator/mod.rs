//! Coordinators: the group coordinator (classic consumer groups).

pub mod group;
