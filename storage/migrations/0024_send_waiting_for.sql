-- What an open send is waiting for, for a person: its nonce used on chain with no
-- receipt shown yet, a proof that another transaction took its nonce, a base fee above
-- its cap. Set by the relayer as it decides to wait (never a reason to sign again);
-- shown by `rflow sends ls`, `rflow runs show`, the API and the console; cleared when
-- the send moves on or settles. `nonce_used`: the chain shows its nonce used, so there
-- is nothing left to speed up or cancel, only a receipt (or a proof) to wait for.
ALTER TABLE sends ADD COLUMN waiting_for text;
ALTER TABLE sends ADD COLUMN waiting_since timestamptz;
ALTER TABLE sends ADD COLUMN nonce_used boolean NOT NULL DEFAULT false;
