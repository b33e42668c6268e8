// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

/// @title Multicall3 (aggregate3Value only), for tests.
/// @notice Tests install its runtime code at Multicall3's canonical address on anvil,
/// where the relayer sends its multicall batches. Same interface and checks as
/// Multicall3's aggregate3Value: every call with its value, a failure allowed only
/// when the call says so, and the calls' values summing to msg.value.
contract Multicall3 {
    struct Call3Value {
        address target;
        bool allowFailure;
        uint256 value;
        bytes callData;
    }

    struct Result {
        bool success;
        bytes returnData;
    }

    function aggregate3Value(Call3Value[] calldata calls)
        external
        payable
        returns (Result[] memory returnData)
    {
        uint256 total;
        returnData = new Result[](calls.length);
        for (uint256 i = 0; i < calls.length; i++) {
            Call3Value calldata call = calls[i];
            total += call.value;
            (bool success, bytes memory data) = call.target.call{value: call.value}(call.callData);
            require(success || call.allowFailure, "Multicall3: call failed");
            returnData[i] = Result(success, data);
        }
        require(msg.value == total, "Multicall3: value mismatch");
    }
}
