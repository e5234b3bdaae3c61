# Python port of crates/gpuplan-core/src/memory/caching.rs (same rules) + release on OOM.
MIN_BLOCK=512; SMALL_SIZE=1<<20; SMALL_BUFFER=2<<20; LARGE_BUFFER=20<<20; MIN_LARGE_ALLOC=10<<20; ROUND_LARGE=2<<20
class Alloc:
    def __init__(self, capacity=None):
        self.segs=[]  # [small, [ [size, free, id] ... ]]
        self.next=0; self.allocated=0; self.reserved=0; self.peak_allocated=0; self.peak_reserved=0
        self.capacity=capacity; self.nmalloc=0; self.seg_sizes=[]
    @staticmethod
    def rnd(b):
        b=max(1,int(-(-b//1)))
        return -(-b//MIN_BLOCK)*MIN_BLOCK
    def alloc(self, nbytes):
        size=self.rnd(nbytes); small=size<=SMALL_SIZE
        best=None
        for si,(pool,blocks) in enumerate(self.segs):
            if pool!=small: continue
            for bi,b in enumerate(blocks):
                if b[1] and b[0]>=size and (best is None or b[0]<best[2]):
                    best=(si,bi,b[0])
        if best is None:
            seg = SMALL_BUFFER if small else (LARGE_BUFFER if size<MIN_LARGE_ALLOC else -(-size//ROUND_LARGE)*ROUND_LARGE)
            if self.capacity is not None and self.reserved+seg>self.capacity:
                # release_cached_blocks: free every segment whose single block is free
                keep=[]
                for s in self.segs:
                    if len(s[1])==1 and s[1][0][1]:
                        self.reserved-=s[1][0][0]
                    else: keep.append(s)
                self.segs=keep
                if self.reserved+seg>self.capacity:
                    raise MemoryError(size)
            self.reserved+=seg; self.nmalloc+=1; self.seg_sizes.append(seg)
            self.segs.append([small,[[seg,True,-1]]]); si,bi=len(self.segs)-1,0
        else: si,bi=best[0],best[1]
        i=self.next; self.next+=1
        blocks=self.segs[si][1]; rest=blocks[bi][0]-size
        split = rest>=MIN_BLOCK if small else rest>SMALL_SIZE
        if split:
            blocks[bi][0]=size; blocks.insert(bi+1,[rest,True,-1])
        blocks[bi][1]=False; blocks[bi][2]=i
        self.allocated+=blocks[bi][0]
        self.peak_allocated=max(self.peak_allocated,self.allocated); self.peak_reserved=max(self.peak_reserved,self.reserved)
        return i
    def free(self, i):
        for pool,blocks in self.segs:
            for b,x in enumerate(blocks):
                if not x[1] and x[2]==i:
                    self.allocated-=x[0]; x[1]=True; x[2]=-1
                    if b+1<len(blocks) and blocks[b+1][1]:
                        x[0]+=blocks[b+1][0]; del blocks[b+1]
                    if b>0 and blocks[b-1][1]:
                        blocks[b-1][0]+=x[0]; del blocks[b]
                    return
