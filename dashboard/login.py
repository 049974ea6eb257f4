"""Who may see the dashboard: nobody is asked to log in unless Streamlit's authentication is configured.

The dashboard has no accounts of its own. Configured with an ``[auth]`` section in Streamlit's ``secrets.toml``
(an OpenID Connect provider: Google, Microsoft Entra, Okta, Auth0, Keycloak, ...), every page first asks the
visitor to log in through :func:`streamlit.login` and shows nothing until they have. Without it, anyone who can
reach the server reads every stored result: keep it on loopback or put it behind a reverse proxy that
authenticates (docs/security.md).
"""

from __future__ import annotations

import streamlit as st


def auth_configured() -> bool:
    """Whether Streamlit's secrets hold an ``[auth]`` section (``st.login`` is then available)."""
    return bool(st.secrets.load_if_toml_exists()) and "auth" in st.secrets


def require_login() -> None:
    """With authentication configured, stop the page here for a visitor who has not logged in."""
    if not auth_configured():
        return
    if st.user.get("is_logged_in", False):
        st.sidebar.button("Log out", on_click=st.logout, icon=":material/logout:")
        return
    st.title("fp8bench")
    st.info("This dashboard asks you to log in first.")
    st.button("Log in", on_click=st.login, icon=":material/login:")
    st.stop()
