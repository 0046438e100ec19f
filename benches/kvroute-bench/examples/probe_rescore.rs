use kvroute_bench::{ConversationFleet, FLEET_SEED, route};
fn main() {
    let fleet = ConversationFleet::new(512, FLEET_SEED);
    let router = route::router(&fleet);
    let query = fleet.requests[0].clone();
    for _ in 0..3 {
        let d = router.route(&route::request(&query)).expect("routes");
        println!(
            "slot {:?} rescores {} reason {:?}",
            d.slot, d.rescores, d.reason
        );
    }
    println!("{:?}", router.stats().rescores);
}
