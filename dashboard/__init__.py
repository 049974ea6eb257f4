"""The Streamlit dashboard (installed as ``fp8bench.dashboard``); reads only through fp8bench's store API."""
