// An OpenID Connect provider for trying `make hub AUTH=oidc` on one machine: Node's
// oidc-provider (hub/package.json) with the class's people as its accounts. It stands in
// for an institution's identity provider (Keycloak, Azure AD, Shibboleth's OIDC...); the
// hub talks to it exactly as to those: discovery, the authorization code flow with PKCE
// (required here) and a client secret, the token and userinfo endpoints.
//
//   node hub/oidc-provider.mjs SETTINGS.json
//
// SETTINGS (written by hub/classroom.py, 0600): {issuer, host, port, accounts, keys,
// clients: [{client_id, client_secret, redirect_uris}]}. `accounts` names a JSON file
// {id: {name, email, password: "scrypt$<salt hex>$<hash hex>"}} (hub/credentials.py's
// format), read again at every login: an account added there can log in at once. `keys`
// names the provider's private signing key (a JWK set), made on first start.
//
// The login page is this file's own (a user name and a password, checked against the
// scrypt hash); consent is given for the registered client without asking, as an
// institution's provider does for an application it registered. Accounts are not the
// hub's users: the hub lets in only the class list's ids.

import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import querystring from 'node:querystring';

import Provider from 'oidc-provider';

const settings = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));

function readAccounts() {
  return JSON.parse(fs.readFileSync(settings.accounts, 'utf8'));
}

// scrypt with hub/credentials.py's parameters (N=2^14, r=8, p=1, 32 bytes).
function checkPassword(password, stored) {
  const parts = String(stored || '').split('$');
  if (parts.length !== 3 || parts[0] !== 'scrypt') return false;
  const wanted = Buffer.from(parts[2], 'hex');
  const got = crypto.scryptSync(password, Buffer.from(parts[1], 'hex'), wanted.length,
    { N: 2 ** 14, r: 8, p: 1 });
  return wanted.length === 32 && crypto.timingSafeEqual(got, wanted);
}

function signingKeys() {
  if (!fs.existsSync(settings.keys)) {
    const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
    const jwk = { ...privateKey.export({ format: 'jwk' }), use: 'sig', alg: 'RS256',
      kid: crypto.randomBytes(8).toString('hex') };
    fs.writeFileSync(settings.keys, JSON.stringify({ keys: [jwk] }), { mode: 0o600 });
  }
  return JSON.parse(fs.readFileSync(settings.keys, 'utf8'));
}

const provider = new Provider(settings.issuer, {
  clients: settings.clients.map((c) => ({
    client_id: c.client_id,
    client_secret: c.client_secret,
    redirect_uris: c.redirect_uris,
    grant_types: ['authorization_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
  })),
  // PKCE (S256) even for this confidential client: both the secret and the verifier.
  pkce: { required: () => true },
  jwks: signingKeys(),
  cookies: { keys: [crypto.randomBytes(32).toString('hex')] },
  claims: {
    openid: ['sub'],
    profile: ['name', 'preferred_username'],
    email: ['email', 'email_verified'],
  },
  features: { devInteractions: { enabled: false } },
  ttl: { AccessToken: 3600, AuthorizationCode: 60, IdToken: 3600, Interaction: 900,
    Session: 8 * 3600, Grant: 8 * 3600 },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  async findAccount(ctx, id) {
    const account = readAccounts()[id];
    if (!account) return undefined;
    return {
      accountId: id,
      async claims() {
        return { sub: id, preferred_username: id, name: account.name,
          email: account.email, email_verified: true };
      },
    };
  },
});
provider.proxy = false;

const escape = (s) => String(s).replace(/[&<>"']/g,
  (ch) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[ch]);

function loginPage(res, uid, login, error, status = 200) {
  res.writeHead(status, { 'Content-Type': 'text/html; charset=utf-8',
    'Cache-Control': 'no-store' });
  res.end(`<!doctype html><html><head><meta charset="utf-8"><title>Sign in</title></head>
<body><main style="font-family:sans-serif;max-width:24em;margin:4em auto">
<h1>Sign in</h1><p>to the attention course's hub (this machine's identity provider)</p>
${error ? `<p id="error" role="alert" style="color:#a00">${escape(error)}</p>` : ''}
<form method="post" action="/interaction/${escape(uid)}/login" autocomplete="off">
<label>User name <input id="username" name="login" required value="${escape(login)}"></label><br>
<label>Password <input id="password" name="password" type="password" required></label><br>
<button id="signin" type="submit">Sign in</button></form></main></body></html>`);
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    let body = '';
    req.on('data', (chunk) => {
      body += chunk;
      if (body.length > 10000) reject(new Error('body too large'));
    });
    req.on('end', () => resolve(querystring.parse(body)));
    req.on('error', reject);
  });
}

async function interaction(req, res) {
  const details = await provider.interactionDetails(req, res);
  const { uid, prompt, params, session } = details;
  if (prompt.name === 'consent') {
    // The registered client is the course's hub: consent without a page.
    const grant = details.grantId ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
    if (prompt.details.missingOIDCScope) grant.addOIDCScope(prompt.details.missingOIDCScope.join(' '));
    if (prompt.details.missingOIDCClaims) grant.addOIDCClaims(prompt.details.missingOIDCClaims);
    const grantId = await grant.save();
    return provider.interactionFinished(req, res, { consent: { grantId } },
      { mergeWithLastSubmission: true });
  }
  if (req.method === 'GET') return loginPage(res, uid, params.login_hint || '');
  const form = await readBody(req);
  const login = String(form.login || '').trim();
  const account = readAccounts()[login];
  if (!account || !checkPassword(String(form.password || ''), account.password)) {
    console.log(`failed sign-in for ${JSON.stringify(login)}`);
    return loginPage(res, uid, login, 'Unknown user name or wrong password.', 401);
  }
  console.log(`signed in: ${login}`);
  return provider.interactionFinished(req, res, { login: { accountId: login } },
    { mergeWithLastSubmission: false });
}

const callback = provider.callback();
const server = http.createServer((req, res) => {
  if (/^\/interaction\/[^/]+(\/login)?$/.test(req.url.split('?')[0])) {
    interaction(req, res).catch((err) => {
      console.error(`interaction failed: ${err}`);
      res.writeHead(400, { 'Content-Type': 'text/plain' });
      res.end('This sign-in has expired or is not valid: go back to the hub and start again.\n');
    });
  } else {
    callback(req, res);
  }
});
server.listen(settings.port, settings.host, () => {
  console.log(`oidc-provider: ${settings.issuer}/.well-known/openid-configuration`);
});
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => { server.close(() => process.exit(0)); server.closeAllConnections(); });
}
