// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.20;

/// @title PayoutDesk: where payouts are asked for, on the local chain of rflow's examples.
/// @notice Anyone asks for a payout with request(); the contract only counts it and emits
/// PayoutRequested. The example workflow `event-payout` (examples/event-payout.yaml) pays
/// it from rflow's relayer. `scripts/stack up` deploys it on anvil; `rflow dev emit` asks.
contract PayoutDesk {
    /// @notice `requester` asks for `amount` wei to be paid to `to`; `id` counts requests.
    event PayoutRequested(
        address indexed requester, address indexed to, uint256 amount, uint256 id, string memo
    );

    /// @notice How many payouts each address has asked for.
    mapping(address => uint256) public requestsBy;

    /// @notice How many payouts have been asked for in all (the next request's id).
    uint256 public requests;

    /// @notice Ask for `amount` wei to be paid to `to`, saying why in `memo`.
    function request(address to, uint256 amount, string calldata memo) external returns (uint256 id) {
        id = requests++;
        requestsBy[msg.sender] += 1;
        emit PayoutRequested(msg.sender, to, amount, id, memo);
    }
}
