"""Replay a `torch.cuda.memory._record_memory_history` trace (trace-<tag>.csv of
mla_prefill_probe.py: i, action, addr, size, frame) through PyTorch's caching-allocator rules as
crates/gpuplan-core/src/memory/caching.rs implements them (512 B rounding; small pool <= 1 MiB in 2 MiB
segments; large requests best-fit over free cached blocks, split when more than 1 MiB remains, new
segments of 20 MiB under 10 MiB and the request rounded to 2 MiB above; frees merge with free
neighbours; nothing returned to the device), from an empty allocator, and print its allocated and
reserved peaks. Usage: python3 replay_trace.py trace-*.csv"""
import csv, sys
MIN_BLOCK=512; SMALL_SIZE=1<<20; SMALL_BUFFER=2<<20; LARGE_BUFFER=20<<20; MIN_LARGE_ALLOC=10<<20; ROUND_LARGE=2<<20
class A:
    def __init__(s): s.segs=[]; s.next=0; s.alloc_=0; s.res=0; s.pa=0; s.pr=0
    def alloc(s, nbytes):
        size=-(-max(1,nbytes)//MIN_BLOCK)*MIN_BLOCK; small=size<=SMALL_SIZE
        best=None
        for si,(pool,bl) in enumerate(s.segs):
            if pool!=small: continue
            for bi,b in enumerate(bl):
                if b[1] and b[0]>=size and (best is None or b[0]<best[2]): best=(si,bi,b[0])
        if best is None:
            seg = SMALL_BUFFER if small else (LARGE_BUFFER if size<MIN_LARGE_ALLOC else -(-size//ROUND_LARGE)*ROUND_LARGE)
            s.res+=seg; s.segs.append((small,[[seg,True,None]])); si,bi=len(s.segs)-1,0
        else: si,bi=best[0],best[1]
        bl=s.segs[si][1]; rest=bl[bi][0]-size
        if (rest>=MIN_BLOCK) if small else (rest>SMALL_SIZE):
            bl[bi][0]=size; bl.insert(bi+1,[rest,True,None])
        bl[bi][1]=False; i=s.next; s.next+=1; bl[bi][2]=i
        s.alloc_+=bl[bi][0]; s.pa=max(s.pa,s.alloc_); s.pr=max(s.pr,s.res); return i
    def free(s,i):
        for pool,bl in s.segs:
            for bi,b in enumerate(bl):
                if not b[1] and b[2]==i:
                    s.alloc_-=b[0]; b[1]=True; b[2]=None
                    if bi+1<len(bl) and bl[bi+1][1]: b[0]+=bl[bi+1][0]; del bl[bi+1]
                    if bi>0 and bl[bi-1][1]: bl[bi-1][0]+=b[0]; del bl[bi]
                    return
def replay(path, n=1):
    rows=list(csv.DictReader(open(path)))
    a=A(); live={}
    for _ in range(n):
      for r in rows:
        if r['action']=='alloc': live[r['addr']]=a.alloc(int(r['size']))
        elif r['action']=='free_completed': a.free(live.pop(r['addr']))
    return a
if __name__=='__main__':
    for p in sys.argv[1:]:
        a=replay(p); a2=replay(p,3)
        print(p, 'peak_alloc %.3f GiB reserved %.3f GiB; 3 fwds reserved %.3f'%(a.pa/2**30,a.pr/2**30,a2.pr/2**30))
