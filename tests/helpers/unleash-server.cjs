// Runs a real unleash-server (the devDependency, 8.2.0) for tests: its own database, loopback only.
// Arguments: PORT DATABASE_NAME [auth]. With "auth", authentication is on (Unleash's own, as deployed):
// every API call needs a token, and the tokens are the ones Unleash creates at its first start from
// INIT_ADMIN_API_TOKENS and INIT_BACKEND_API_TOKENS (its documented variables, read by unleash-server
// itself). Without it, authentication is off.
const unleash = require('unleash-server');

const [port, database, mode] = process.argv.slice(2);
unleash
  .start({
    db: { host: '127.0.0.1', port: 5432, user: 'postgres', password: '', database, ssl: false },
    server: { port: Number(port), host: '127.0.0.1' },
    authentication: mode === 'auth' ? { type: 'open-source', enableApiToken: true } : { type: 'none' },
    logLevel: 'error',
  })
  .then(() => console.log('unleash ready'))
  .catch((error) => {
    console.error(error);
    process.exit(1);
  });
process.on('SIGTERM', () => process.exit(0));
