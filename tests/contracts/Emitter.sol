// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.20;

/// @title Emitter: emits events on demand, for chain-trigger tests.
contract Emitter {
    event Swap(address indexed sender, uint256 amountIn, uint256 amountOut);
    event Ping(address indexed sender, uint256 indexed id, string note);

    /// @notice Emit Swap(msg.sender, amountIn, amountOut).
    function swap(uint256 amountIn, uint256 amountOut) external {
        emit Swap(msg.sender, amountIn, amountOut);
    }

    /// @notice Emit Ping(msg.sender, id, note).
    function ping(uint256 id, string calldata note) external {
        emit Ping(msg.sender, id, note);
    }
}
