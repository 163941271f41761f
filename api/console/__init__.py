"""The console at ``/console``: server-rendered pages for compliance staff and operators.

Every page and action is a call to the HTTP API itself, made in process with the key from
the session cookie as its ``Authorization`` header: identity, role, scope, rate limit and
audit are the API gate's, never a second path.
"""
