//! Several regions, one exact count (docs/REGIONS.md): each post has a home region, and only the
//! home counts it. The rule every region holds the same list for.

use crate::config::Invalid;
use crate::hashing::hash_key;

/// Where each post is counted: the regions in one order, and which of them this one is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Homes {
    /// This deployment's region.
    pub this: String,
    /// Every region, in the order posts are hashed to (the same list in every region).
    pub regions: Vec<String>,
}

impl Homes {
    /// The regions as `[regions]` sets them (`this`, `homes`), checked: `None` for one region
    /// (`this` empty and no list).
    pub fn of(this: &str, regions: &[String]) -> Result<Option<Homes>, Invalid> {
        if this.is_empty() && regions.is_empty() {
            return Ok(None);
        }
        if !regions.iter().any(|r| r == this) {
            return Err(Invalid::new(
                "regions.this",
                "one of `regions.homes`",
                format!("{this:?} with homes {regions:?}"),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some(twice) = regions.iter().find(|r| !seen.insert(r.as_str())) {
            return Err(Invalid::new(
                "regions.homes",
                "each region once",
                format!("{twice:?} twice"),
            ));
        }
        Ok(Some(Homes {
            this: this.to_owned(),
            regions: regions.to_vec(),
        }))
    }

    /// The post's home: the region its id's hash key (as Kinesis hashes a partition key) falls
    /// to, modulo the list's length.
    pub fn home(&self, post_id: &str) -> &str {
        let i = hash_key(post_id) % self.regions.len() as u128;
        &self.regions[i as usize]
    }

    /// Whether this region counts the post.
    pub fn is_here(&self, post_id: &str) -> bool {
        self.home(post_id) == self.this
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn homes(this: &str) -> Homes {
        Homes::of(this, &["us".into(), "eu".into(), "ap".into()])
            .unwrap()
            .unwrap()
    }

    /// Every post has one home, the same in every region, and the posts spread over them.
    #[test]
    fn each_post_has_one_home_every_region_agrees_on() {
        let (us, eu, ap) = (homes("us"), homes("eu"), homes("ap"));
        let mut per = std::collections::BTreeMap::new();
        for i in 0..3_000 {
            let p = format!("p{i}");
            assert_eq!(us.home(&p), eu.home(&p));
            let here = [&us, &eu, &ap].iter().filter(|h| h.is_here(&p)).count();
            assert_eq!(here, 1, "{p}");
            *per.entry(us.home(&p).to_owned()).or_insert(0) += 1;
        }
        assert!(per.values().all(|&n| n > 800), "{per:?}");
    }

    #[test]
    fn a_region_outside_the_list_or_listed_twice_is_named() {
        let e = Homes::of("sa", &["us".into(), "eu".into()]).unwrap_err();
        assert!(e.to_string().contains("`regions.this`"), "{e}");
        let e = Homes::of("us", &["us".into(), "us".into()]).unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
        assert_eq!(Homes::of("", &[]).unwrap(), None);
    }
}
