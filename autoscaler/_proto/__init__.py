"""Generated protobuf messages of KEDA's external scaler protocol (``make proto``; do not edit)."""
