// oidc-provider configured like the gatehouse benchmark client: one
// confidential client (HTTP Basic) with the client_credentials grant, the
// scope `read`, and JWT access tokens (RFC 9068) signed with EdDSA.
// Usage: node oidc-server.mjs PORT
import { generateKeyPairSync } from 'node:crypto';
import Provider from 'oidc-provider';

const port = Number(process.argv[2] || 18090);
const issuer = `http://127.0.0.1:${port}`;
const resource = 'https://api.example';
const key = generateKeyPairSync('ed25519').privateKey.export({ format: 'jwk' });

const provider = new Provider(issuer, {
  clients: [{
    client_id: 'bench-client',
    client_secret: 'bench-client-secret-0123456789',
    grant_types: ['client_credentials'],
    redirect_uris: [],
    response_types: [],
    token_endpoint_auth_method: 'client_secret_basic',
    id_token_signed_response_alg: 'EdDSA',
    scope: 'read',
  }],
  scopes: ['read'],
  jwks: { keys: [{ ...key, alg: 'EdDSA', use: 'sig', kid: 'bench' }] },
  features: {
    clientCredentials: { enabled: true },
    introspection: { enabled: true },
    devInteractions: { enabled: false },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => resource,
      useGrantedResource: () => true,
      getResourceServerInfo: () => ({
        scope: 'read',
        audience: resource,
        accessTokenTTL: 3600,
        accessTokenFormat: 'jwt',
        jwt: { sign: { alg: 'EdDSA' } },
      }),
    },
  },
});
provider.proxy = false;
provider.listen(port, '127.0.0.1', () => console.log(`oidc-provider listening on ${issuer}`));
