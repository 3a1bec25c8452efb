"""The web view in a real browser (headless Chromium), and its forms over HTTP."""
