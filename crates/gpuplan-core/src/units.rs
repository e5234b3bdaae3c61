//! Quantity newtypes. Rust names carry no units; the type does.
//!
//! GB = 1e9 bytes, GiB = 2^30 bytes; the constructors say which. Only meaningful arithmetic is
//! implemented (`Bytes / BytesPerSec = Seconds`, `Watts * Seconds = Joules`, ...). There is no
//! `From<f64>` and no `Deref`: convert once, at the boundary, with a named constructor.

use std::fmt;
use std::iter::Sum;
use std::ops::{Add, AddAssign, Div, Mul, Sub};

macro_rules! quantity {
    ($name:ident, $unit:literal) => {
        #[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
        pub struct $name(f64);

        impl $name {
            pub const ZERO: $name = $name(0.0);
            /// The value in the type's base unit (
            #[doc = $unit]
            /// ).
            pub const fn value(self) -> f64 {
                self.0
            }
            pub fn max(self, other: Self) -> Self {
                $name(self.0.max(other.0))
            }
            pub fn min(self, other: Self) -> Self {
                $name(self.0.min(other.0))
            }
            pub fn is_finite(self) -> bool {
                self.0.is_finite()
            }
        }
        impl Add for $name {
            type Output = $name;
            fn add(self, o: $name) -> $name {
                $name(self.0 + o.0)
            }
        }
        impl AddAssign for $name {
            fn add_assign(&mut self, o: $name) {
                self.0 += o.0;
            }
        }
        impl Sub for $name {
            type Output = $name;
            fn sub(self, o: $name) -> $name {
                $name(self.0 - o.0)
            }
        }
        impl Mul<f64> for $name {
            type Output = $name;
            fn mul(self, k: f64) -> $name {
                $name(self.0 * k)
            }
        }
        impl Mul<$name> for f64 {
            type Output = $name;
            fn mul(self, q: $name) -> $name {
                $name(self * q.0)
            }
        }
        impl Div<f64> for $name {
            type Output = $name;
            fn div(self, k: f64) -> $name {
                $name(self.0 / k)
            }
        }
        /// A ratio of two quantities of the same kind.
        impl Div for $name {
            type Output = f64;
            fn div(self, o: $name) -> f64 {
                self.0 / o.0
            }
        }
        impl Sum for $name {
            fn sum<I: Iterator<Item = $name>>(iter: I) -> $name {
                $name(iter.map(|q| q.0).sum())
            }
        }
    };
}

quantity!(Bytes, "bytes");
quantity!(Flops, "floating-point operations");
quantity!(Seconds, "seconds");
quantity!(BytesPerSec, "bytes per second");
quantity!(FlopsPerSec, "floating-point operations per second");
quantity!(Watts, "watts");
quantity!(Joules, "joules");
quantity!(Hertz, "hertz");

impl Bytes {
    pub const fn new(bytes: f64) -> Self {
        Bytes(bytes)
    }
    pub fn gb(gb: f64) -> Self {
        Bytes(gb * 1e9)
    }
    pub fn gib(gib: f64) -> Self {
        Bytes(gib * GIB)
    }
    pub fn mib(mib: f64) -> Self {
        Bytes(mib * 1024.0 * 1024.0)
    }
    pub fn as_gib(self) -> f64 {
        self.0 / GIB
    }
    pub fn as_gb(self) -> f64 {
        self.0 / 1e9
    }
}

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

impl Flops {
    pub const fn new(flops: f64) -> Self {
        Flops(flops)
    }
    pub fn as_tflop(self) -> f64 {
        self.0 / 1e12
    }
}

impl Seconds {
    pub const fn new(s: f64) -> Self {
        Seconds(s)
    }
    pub fn ms(ms: f64) -> Self {
        Seconds(ms * 1e-3)
    }
    pub fn us(us: f64) -> Self {
        Seconds(us * 1e-6)
    }
    pub fn as_ms(self) -> f64 {
        self.0 * 1e3
    }
    pub fn as_us(self) -> f64 {
        self.0 * 1e6
    }
}

impl BytesPerSec {
    pub fn gb_per_s(gb: f64) -> Self {
        BytesPerSec(gb * 1e9)
    }
    /// Network line rate in gigabits per second.
    pub fn gbit_per_s(gbit: f64) -> Self {
        BytesPerSec(gbit * 1e9 / 8.0)
    }
    pub fn as_gb_per_s(self) -> f64 {
        self.0 / 1e9
    }
}

impl FlopsPerSec {
    pub fn tflops(t: f64) -> Self {
        FlopsPerSec(t * 1e12)
    }
    pub fn as_tflops(self) -> f64 {
        self.0 / 1e12
    }
}

impl Watts {
    pub const fn new(w: f64) -> Self {
        Watts(w)
    }
    /// NVML reports power in milliwatts.
    pub fn milliwatts(mw: u32) -> Self {
        Watts(f64::from(mw) * 1e-3)
    }
}

impl Joules {
    pub const fn new(j: f64) -> Self {
        Joules(j)
    }
    pub fn as_kwh(self) -> f64 {
        self.0 / 3.6e6
    }
}

impl Hertz {
    pub fn mhz(mhz: f64) -> Self {
        Hertz(mhz * 1e6)
    }
    pub fn as_mhz(self) -> f64 {
        self.0 / 1e6
    }
}

impl Div<BytesPerSec> for Bytes {
    type Output = Seconds;
    fn div(self, bw: BytesPerSec) -> Seconds {
        Seconds(self.0 / bw.0)
    }
}
impl Div<Seconds> for Bytes {
    type Output = BytesPerSec;
    fn div(self, t: Seconds) -> BytesPerSec {
        BytesPerSec(self.0 / t.0)
    }
}
impl Div<FlopsPerSec> for Flops {
    type Output = Seconds;
    fn div(self, r: FlopsPerSec) -> Seconds {
        Seconds(self.0 / r.0)
    }
}
impl Div<Seconds> for Flops {
    type Output = FlopsPerSec;
    fn div(self, t: Seconds) -> FlopsPerSec {
        FlopsPerSec(self.0 / t.0)
    }
}
impl Mul<Seconds> for Watts {
    type Output = Joules;
    fn mul(self, t: Seconds) -> Joules {
        Joules(self.0 * t.0)
    }
}
impl Div<Seconds> for Joules {
    type Output = Watts;
    fn div(self, t: Seconds) -> Watts {
        Watts(self.0 / t.0)
    }
}

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.2} GiB", self.as_gib())
    }
}
impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.abs() >= 1.0 {
            write!(f, "{:.3} s", self.0)
        } else if self.0.abs() >= 1e-3 {
            write!(f, "{:.3} ms", self.0 * 1e3)
        } else {
            write!(f, "{:.2} us", self.0 * 1e6)
        }
    }
}
impl fmt::Display for Watts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.0} W", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gb_and_gib_differ() {
        assert_eq!(Bytes::gb(1.0).value(), 1e9);
        assert_eq!(Bytes::gib(1.0).value(), 1073741824.0);
    }

    #[test]
    fn dimensional_arithmetic() {
        let t = Bytes::gb(4.0) / BytesPerSec::gb_per_s(2.0);
        assert!((t.value() - 2.0).abs() < 1e-12);
        let e = Watts::new(700.0) * Seconds::new(2.0);
        assert_eq!(e.value(), 1400.0);
        assert_eq!(Watts::milliwatts(700_500).value(), 700.5);
        assert_eq!(BytesPerSec::gbit_per_s(400.0).as_gb_per_s(), 50.0);
        let t = Flops::new(2e12) / FlopsPerSec::tflops(1.0);
        assert!((t.value() - 2.0).abs() < 1e-12);
    }
}
